"""The built-in DDP classifier, its data and its weights, with real processes where it matters.

The DDP facts come from one ``mpirun -n 4`` of tests/mpi_programs/ddp_checks.py (two workers of
two ranks, real Contexts, gloo), shared by the tests below.
"""

from __future__ import annotations

import json
import math
import struct
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import atoll
from atoll.errors import ObjectiveError
from atoll.record import open_run
from conftest import ROOT, kill_tree, mpi_env, mpirun_atoll, mpirun_cmd, run

torch = pytest.importorskip("torch")
classifier = pytest.importorskip("atoll.objectives.classifier")
data = pytest.importorskip("atoll.objectives.data")
weights = pytest.importorskip("atoll.record.models")

METRICS = ("train_loss", "val_loss", "val_accuracy", "lr", "epoch_seconds", "samples_per_second",
           "setup_seconds")
MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
               "t10k-labels-idx1-ubyte")


def write_mnist(root: Path, n_train: int = 64, n_test: int = 32, seed: int = 0) -> Path:
    """Tiny MNIST in torchvision's raw layout: ROOT/MNIST/raw/*-idx?-ubyte (uncompressed)."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = rng.integers(0, 40, (n, 28, 28)).astype(np.uint8)
        for i, label in enumerate(labels):  # a learnable bright bar per class
            images[i, 2 + 2 * label:4 + 2 * label, 4:24] = 255
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(
            struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(
            struct.pack(">II", 2049, n) + labels.tobytes())
    return root


@pytest.fixture(scope="module")
def ddp(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("ddp")
    root = write_mnist(base / "data")
    (base / "weights").mkdir()
    out = base / "facts.json"
    done = run(mpirun_cmd(4, str(ROOT / "tests" / "mpi_programs" / "ddp_checks.py"), str(out),
                          str(root), str(base / "stage"), str(base / "weights")), timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    ranks = json.loads(out.read_text())
    return {"ranks": ranks, "weights": base / "weights", "root": root,
            "workers": [[r for r in ranks if r["worker"] == w] for w in (0, 1)]}


# -- DDP under mpirun ------------------------------------------------------------------------

def test_replicas_stay_bit_identical_after_training(ddp):
    for pair in ddp["workers"]:
        for a, b in zip(pair[0]["individuals"], pair[1]["individuals"], strict=True):
            assert a["checksum"] == b["checksum"], f"replicas of individual {a['id']} differ"
    # and the two workers really trained different individuals
    assert ddp["workers"][0][0]["individuals"][0]["checksum"] != \
        ddp["workers"][1][0]["individuals"][0]["checksum"]


def test_validation_metrics_cover_the_whole_set_and_match_one_process(ddp):
    for pair in ddp["workers"]:
        for a, b in zip(pair[0]["individuals"], pair[1]["individuals"], strict=True):
            # identical on every rank, reported and re-evaluated (timings are each rank's own)
            same = ("epoch", "train_loss", "val_loss", "val_accuracy", "lr")
            assert [[e[k] for k in same] for e in a["epochs"]] == \
                [[e[k] for k in same] for e in b["epochs"]]
            assert a["together"] == b["together"] and a["loss"] == b["loss"]
            best = min(e["val_loss"] for e in a["epochs"])
            assert a["loss"] == best == a["kept_loss"]
            # the kept weights are the best epoch's: evaluating them again gives its loss
            assert a["together"][0] == pytest.approx(best, rel=1e-12)
            # one process alone on the whole validation set agrees
            loss, accuracy = a["alone"]
            assert loss == pytest.approx(a["together"][0], rel=1e-6)
            assert accuracy == pytest.approx(a["together"][1], abs=1e-12)


def test_every_rank_reports_every_epoch_with_the_six_metrics(ddp):
    for rank in ddp["ranks"]:
        for ind in rank["individuals"]:
            assert [e["epoch"] for e in ind["epochs"]] == [0, 1, 2]
            for e in ind["epochs"]:
                assert set(METRICS) <= set(e) and all(math.isfinite(e[m]) for m in METRICS)
                assert 0.0 <= e["val_accuracy"] <= 1.0 and e["samples_per_second"] > 0
            lrs = [e["lr"] for e in ind["epochs"]]
            assert lrs == pytest.approx([ind["params"]["lr"] * ind["params"]["gamma"] ** k
                                         for k in range(3)])


def test_a_tanh_net_learns_the_digits(ddp):
    first = ddp["workers"][0][0]["individuals"][0]
    assert first["params"]["activation"] == "tanh"
    assert first["epochs"][-1]["val_loss"] < first["epochs"][0]["val_loss"]


def test_training_shards_are_exclusive_and_validation_shards_cover_the_set(ddp):
    for pair in ddp["workers"]:
        s0, s1 = pair[0]["shards"], pair[1]["shards"]
        n = s0["train_len"]
        for e0, e1 in zip(s0["epochs"], s1["epochs"], strict=True):
            p0, p1 = set(e0["positions"]), set(e1["positions"])
            assert not p0 & p1, "two ranks trained on the same sample"
            assert len(e0["positions"]) == len(e1["positions"]) == n // 2
            assert len(p0 | p1) == n - n % 2 and p0 | p1 <= set(range(n))
            assert e0["labels_match"] and e1["labels_match"]  # the loader yields those samples
        assert s0["epochs"][0]["positions"] != s0["epochs"][1]["positions"]  # set_epoch works
        v0, v1 = s0["val_positions"], s1["val_positions"]
        assert not set(v0) & set(v1) and sorted(v0 + v1) == list(range(s0["val_len"]))
        # the train/validation split is the same on every rank and partitions the samples
        assert s0["train_rows"] == s1["train_rows"] and s0["val_rows"] == s1["val_rows"]
        assert not set(s0["train_rows"]) & set(s0["val_rows"])


def test_the_process_group_is_made_once_per_worker(ddp):
    for rank in ddp["ranks"]:
        inds = rank["individuals"]
        assert [i["init_calls"] for i in inds] == [1, 1, 1]
        assert len({i["group_id"] for i in inds}) == 1
        assert rank["final_init_calls"] == 1  # the MNIST individual reused it too


def test_mnist_from_torchvision_files_staged_once(ddp):
    for rank in ddp["workers"][0]:
        m = rank["mnist"]
        assert m["error"] == "" and math.isfinite(m["loss"]) and m["epochs"] == 2
        assert m["shape"] == [1, 28, 28]
        staged = [Path(p) for p in m["staged"]]
        assert sorted(p.name for p in staged) == sorted(MNIST_FILES)
        assert all(p.parts[1:3] == ("MNIST", "raw") for p in staged)


def test_missing_mnist_directory_is_one_clear_error_on_every_rank(ddp):
    errors = [rank["mnist"]["error"] for rank in ddp["workers"][1]]
    assert errors[0] == errors[1]
    assert "does not exist" in errors[0] and "missing" in errors[0]
    assert "torchvision.datasets.MNIST(" in errors[0] and "download=True" in errors[0]
    assert "\n" not in errors[0]


def test_kept_weights_rebuild_the_network_that_was_evaluated(ddp):
    full = data.load_split("digits", None, "train")
    _, validation = data.train_validation(full, 0.2)
    leader = ddp["workers"][1][0]
    for ind in leader["individuals"]:
        path = ddp["weights"] / f"ind{ind['id']}.h5"
        model = classifier.build_model_from_params(ind["params"], full.shape, full.classes)
        model.load_state_dict(weights.load_state_dict(path))
        loss, _ = classifier.evaluate_whole_set(model, validation)
        assert loss == pytest.approx(ind["kept_loss"], rel=1e-6)
        assert weights.load_attrs(path)["loss"] == ind["loss"]


# -- in one process --------------------------------------------------------------------------

def test_missing_files_name_the_file_and_how_to_stage_it(tmp_path):
    with pytest.raises(ObjectiveError, match=r"does not exist; download it on a login node"):
        data.load_split("mnist", tmp_path / "nowhere", "train")
    root = write_mnist(tmp_path / "d")
    (root / "MNIST" / "raw" / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(ObjectiveError) as info:  # torchvision wants all four files
        data.load_split("mnist", root, "train")
    message = str(info.value)
    assert f"missing {root}/MNIST/raw/t10k-labels-idx1-ubyte" in message and "\n" not in message
    with pytest.raises(ObjectiveError, match="objective.data_dir: not set"):
        data.load_split("cifar10", None, "train")
    with pytest.raises(ObjectiveError, match="expected one of digits, mnist"):
        data.load_split("svhn", tmp_path, "train")


def test_torchvision_data_is_normalised_nchw_and_cached(tmp_path):
    root = write_mnist(tmp_path / "d")
    train = data.load_split("mnist", root, "train")
    assert train.images.shape == (64, 1, 28, 28) and train.images.dtype == torch.float32
    assert train.labels.dtype == torch.int64 and train.classes == 10
    assert abs(float(train.images.mean())) < 3  # normalised, not 0..255
    assert data.load_split("mnist", root, "train") is train  # no second read


def test_digits_splits_are_disjoint_and_fixed():
    train, test = data.load_split("digits", None, "train"), data.load_split("digits", None, "test")
    assert len(train) + len(test) == 1797 and train.shape == (1, 8, 8)
    a, b = data.train_validation(train, 0.2, seed=0), data.train_validation(train, 0.2, seed=0)
    assert torch.equal(a[1].rows, b[1].rows) and len(a[1]) == round(0.2 * len(train))
    assert not set(a[0].rows.tolist()) & set(a[1].rows.tolist())


def test_the_network_fits_any_image_size_and_channel_count():
    for channels, h, w in ((1, 8, 8), (3, 32, 32), (2, 5, 7)):
        for act in classifier.ACTIVATIONS:
            model = classifier.build_model(3, act, channels, h, w, 4)
            out = model(torch.randn(2, channels, h, w))
            assert out.shape == (2, 4)
            assert torch.allclose(out.exp().sum(dim=1), torch.ones(2), atol=1e-5)
    convs = [m for m in classifier.build_model(5, "relu", 1, 8, 8, 10)
             if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 5 and all(c.out_channels == 10 and c.kernel_size == (3, 3)
                                   and c.padding == (1, 1) for c in convs)


def test_weights_round_trip_into_a_fresh_plain_model(tmp_path):
    params = {"conv_layers": 3, "activation": "tanh", "lr": 0.01, "gamma": 0.9}
    train = data.load_split("digits", None, "train")
    test = data.load_split("digits", None, "test")
    torch.manual_seed(0)
    model = classifier.build_model_from_params(params, train.shape, train.classes)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    for start in range(0, 320, 32):
        x, y = train[range(start, start + 32)]
        optimizer.zero_grad()
        torch.nn.functional.nll_loss(model(x), y).backward()
        optimizer.step()
    path = weights.save_state_dict(tmp_path / "best.h5", model.state_dict(), {"id": 7})
    fresh = classifier.build_model_from_params(params, train.shape, train.classes)
    fresh.load_state_dict(weights.load_state_dict(path))
    x, _ = test[range(len(test))]
    with torch.no_grad():
        assert torch.equal(model(x), fresh(x))
    assert classifier.evaluate_whole_set(fresh, test) == classifier.evaluate_whole_set(model, test)
    assert weights.load_attrs(path) == {"id": 7}
    assert not list(tmp_path.glob(".*tmp*"))  # written atomically, nothing left behind


def test_weights_keep_dtypes_shapes_and_names(tmp_path):
    state = {"conv.weight": torch.randn(2, 3), "bf": torch.randn(4).to(torch.bfloat16),
             "steps": torch.tensor(12), "half": torch.randn(3).half(),
             "mask": torch.tensor([True, False]), "f64": torch.randn(2, dtype=torch.float64),
             "empty": torch.empty(0, 5), "block/inner.bias": torch.arange(6).view(2, 3)[:, 1:]}
    back = weights.load_state_dict(weights.save_state_dict(tmp_path / "w.h5", state))
    assert list(back) == list(state)
    for key, tensor in state.items():
        assert back[key].dtype == tensor.dtype and back[key].shape == tensor.shape, key
        assert torch.equal(back[key], tensor), key
    with pytest.raises(TypeError, match="expected a tensor"):
        weights.save_state_dict(tmp_path / "x.h5", {"a": [1.0]})
    assert not (tmp_path / "x.h5").exists()


def test_options_are_checked_before_training():
    assert classifier.read_options({})["dataset"] == "digits"
    with pytest.raises(ObjectiveError, match="objective.options.epoch: unknown option"):
        classifier.read_options({"epoch": 3})
    with pytest.raises(ObjectiveError, match="objective.options.batch_size: expected an integer"):
        classifier.read_options({"batch_size": "64"})
    with pytest.raises(ObjectiveError, match="objective.options.epochs: expected >= 1"):
        classifier.read_options({"epochs": 0})
    with pytest.raises(ObjectiveError, match="objective.options.inherited_epochs: expected >= 0, "
                       "got -1"):
        classifier.read_options({"inherited_epochs": -1})


def test_preflight_finds_bad_input_before_any_training(tmp_path):
    check = classifier.train.preflight
    check({}, None, ("conv_layers", "activation", "lr", "gamma"))  # digits: nothing to read
    check({"dataset": "mnist"}, write_mnist(tmp_path / "d"))
    with pytest.raises(ObjectiveError, match=r"mnist: data directory .* does not exist"):
        check({"dataset": "mnist"}, tmp_path / "none")
    with pytest.raises(ObjectiveError, match="missing gamma"):
        check({}, None, ("conv_layers", "activation", "lr"))
    with pytest.raises(ObjectiveError, match="unknown option"):
        check({"epochz": 1}, None)


def test_a_registered_data_set_needs_no_files_and_is_built_once_per_process(monkeypatch):
    monkeypatch.setattr(data, "_BUILT", {})  # registered in this test only
    monkeypatch.setattr(data, "_CACHE", {})
    built = []

    def tiny(split: str) -> Any:
        built.append(split)
        return data.ImageSet(torch.zeros(4, 1, 8, 8), torch.tensor([0, 1, 0, 1]), 2)

    data.register("tiny", tiny)
    classifier.train.preflight({"dataset": "tiny"}, None)  # no data_dir, nothing to stage
    first = data.load_split("tiny", None, "train")
    assert data.load_split("tiny", None, "train") is first and built == ["train"]
    assert len(data.load_split("tiny", None, "test")) == 4 and built == ["train", "test"]
    with pytest.raises(ObjectiveError, match=r"expected one of digits, .*tiny, got 'tinny'"):
        classifier.read_options({"dataset": "tinny"})
    with pytest.raises(ValueError, match="one of Atoll's own"):
        data.register("digits", tiny)


# -- whole searches --------------------------------------------------------------------------

@pytest.mark.slow
def test_digits_example_search_records_epochs_and_keeps_usable_weights(tmp_path):
    run_dir = tmp_path / "digits"
    done = mpirun_atoll(4, "search", "--config", "examples/digits.toml", "--run-dir",
                        str(run_dir), "--set", "search.generations=2",
                        "--set", "objective.options.epochs=2", timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    result = open_run(run_dir)
    assert len(result.individuals) == 4 and np.isfinite(result.individuals["loss"]).all()
    epochs = result.epochs
    assert set(METRICS) <= set(epochs.dtype.names)
    assert len(epochs) == 8 and np.isfinite(np.stack([epochs[m] for m in METRICS])).all()
    # the user's final test-set evaluation: rebuild the best network from its kept weights
    best = result.individuals[np.argmin(result.individuals["loss"])]
    path = run_dir / "models" / f"ind{int(best['id']):012d}.h5"
    params = {name: best[name] for name in ("conv_layers", "activation", "lr", "gamma")}
    test = data.load_split("digits", None, "test")
    model = classifier.build_model_from_params(params, test.shape, test.classes)
    model.load_state_dict(weights.load_state_dict(path))
    train = data.load_split("digits", None, "train")
    _, validation = data.train_validation(train, 0.2)
    assert classifier.evaluate_whole_set(model, validation)[0] == pytest.approx(
        float(best["loss"]), rel=1e-6)
    assert math.isfinite(classifier.evaluate_whole_set(model, test)[0])
    # ... or in one step: the best individual with its weights, scored on the test split
    found = atoll.best(run_dir)
    assert found.id == int(best["id"]) and found.params == params and found.weights == path
    assert found.metrics["val_loss"] == pytest.approx(found.loss, rel=1e-12)  # its best epoch
    assert weights.load_params(path) == params  # the weights file carries the parameters
    scored = classifier.score_kept(run_dir)
    expected = classifier.evaluate_whole_set(model, test)
    assert (scored["loss"], scored["accuracy"]) == pytest.approx(expected, rel=1e-9)
    assert scored["id"] == found.id and scored["split"] == "test"


@pytest.mark.slow
def test_two_concurrent_jobs_with_process_groups_do_not_collide(tmp_path):
    """Two searches on one machine at once, each with a 2-rank worker: OS-chosen ports."""
    runs = {
        "classifier": ["--config", "examples/digits.toml", "--set", "search.islands=1",
                       "--set", "search.generations=1", "--set", "objective.options.epochs=1"],
        "ddp_user": ["--config", "examples/ddp_user.toml", "--set", "search.generations=1",
                     "--set", "objective.options.epochs=1"],
    }
    procs = {name: subprocess.Popen(
        mpirun_cmd(2, "-m", "atoll", "search", "--run-dir", str(tmp_path / name), *args),
        cwd=ROOT, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True) for name, args in runs.items()}
    try:
        outcomes = {name: (p.communicate(timeout=240), p.returncode) for name, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                kill_tree(p)
    for name, ((_, err), code) in outcomes.items():
        assert code == 0, f"{name}: {err[-3000:]}"
        assert len(open_run(tmp_path / name).individuals) == 1


@pytest.mark.slow
def test_the_embedded_default_search_learns_and_its_summary_shows_accuracy(tmp_path):
    """What `make run` runs: 48 individuals; the best reaches 95% validation accuracy."""
    run_dir = tmp_path / "default"
    done = mpirun_atoll(4, "search", "--run-dir", str(run_dir), timeout=480)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "budget: 48 of 48 completed" in done.stdout
    header, first = done.stdout.split("Best 5 of 48 ok:\n")[1].splitlines()[:2]
    assert header.split()[:3] == ["id", "loss", "val_accuracy"]
    assert float(first.split()[2]) >= 0.95
    result = open_run(run_dir)
    assert float(np.nanmax(result.epochs["val_accuracy"])) >= 0.95
