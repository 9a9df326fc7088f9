"""Kept weights (``ctx.keep_weights``, ``record.top_models``) through real searches and files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import atoll
from atoll.individual import Status
from atoll.record import open_run
from atoll.record.models import load_attrs, load_params, load_state_dict, save_state_dict
from conftest import mpirun_atoll


def _search(tmp_path: Path, ranks: int, objective: str, *settings: str, said: str = ""
            ) -> Path:
    """A search of tests/objectives.py's ``objective``; ``said``: a line its stderr has once."""
    run_dir = tmp_path / "run"
    sets = [arg for s in settings for arg in ("--set", s)]
    done = mpirun_atoll(
        ranks, "search", "--config", "tests/configs/slow_sphere.toml", "--run-dir",
        str(run_dir), "--set", f"objective.name=objectives:{objective}", *sets, "-q")
    assert done.returncode == 0, done.stderr[-3000:]
    assert not said or done.stderr.count(said) == 1, done.stderr[-3000:]
    return run_dir


def test_offering_every_epoch_keeps_each_individuals_best_and_the_runs_best(tmp_path):
    """Two leaders, six offers per evaluation (worse ones too): models/ holds exactly the run's
    best top_models, each file with its individual's best offer."""
    run_dir = _search(tmp_path, 2, "offers_every_epoch", "search.generations=10",
                      "record.top_models=3")
    ind = open_run(run_dir).individuals
    ok = ind[ind["status"] == int(Status.OK)]
    best3 = ok[np.argsort(ok["loss"])[:3]]
    files = sorted((run_dir / "models").iterdir())
    assert [p.name for p in files] == [f"ind{i:012d}.h5" for i in sorted(best3["id"])]
    for row in best3:
        path = run_dir / "models" / f"ind{int(row['id']):012d}.h5"
        assert load_attrs(path)["loss"] == row["loss"]  # the best of its six offers
        assert load_state_dict(path)["w"].tolist() == [row["loss"]] * 3
    found = atoll.best(run_dir)
    assert found.id == int(best3["id"][0])
    assert found.weights == run_dir / "models" / f"ind{found.id:012d}.h5"


def test_the_runs_best_are_completed_individuals_before_pruned_or_failed_ones(tmp_path):
    """A pruned individual's low loss or a failed one's NaN never takes a completed
    individual's place (NaN used to sort anywhere)."""
    import torch

    from atoll.record import RunPaths
    from atoll.record.models import prune_to_top, save_state_dict

    paths = RunPaths(tmp_path)
    paths.model_file(0).parent.mkdir()
    for ident in (1, 2, 3, 4):
        save_state_dict(paths.model_file(ident), {"w": torch.zeros(1)})
    table = np.array([(1, int(Status.FAILED), np.nan), (2, int(Status.OK), 0.5),
                      (3, int(Status.PRUNED), 0.1), (4, int(Status.OK), 0.7)],
                     dtype=[("id", "i8"), ("status", "i1"), ("loss", "f8")])
    assert prune_to_top(paths, table, 2) == [2, 4]
    assert sorted(paths.model_files()) == [2, 4]


def test_leaders_offering_for_one_individual_keep_its_best_weights(tmp_path):
    """An individual paused by one leader and promoted by another, or continued by the next
    job, is offered by two TopWeights: neither replaces better weights with worse ones, and
    the first never deletes, as its own worst, the better weights the other kept since."""
    import torch

    from atoll.record import RunPaths
    from atoll.record.models import TopWeights

    def offer(keeper: TopWeights, ident: int, loss: float) -> None:
        keeper.offer(ident, loss, {"w": torch.full((2,), loss)})

    def kept(ident: int) -> float:
        return float(load_attrs(RunPaths(tmp_path).model_file(ident))["loss"])

    first, promoter = TopWeights(RunPaths(tmp_path), 2), TopWeights(RunPaths(tmp_path), 2)
    offer(first, 10, 0.3)
    offer(promoter, 10, 0.5)  # worse: the file keeps 0.3
    assert kept(10) == 0.3
    offer(promoter, 10, 0.05)  # better: the file holds it
    assert kept(10) == 0.05
    offer(first, 12, 0.2)
    offer(first, 14, 0.1)  # the first leader's worst is 10 at 0.3, by what it knows
    assert sorted(RunPaths(tmp_path).model_files()) == [10, 12, 14]
    assert kept(10) == 0.05  # still the promoter's weights
    offer(first, 16, 0.15)  # 12 is the first leader's own, at its own loss: it goes
    assert sorted(RunPaths(tmp_path).model_files()) == [10, 14, 16]


def test_a_weights_file_written_with_variable_length_strings_still_loads(tmp_path):
    """Atoll wrote a weights file's text as variable-length strings (in HDF5's global heap)
    before; such a file, written here the old way with plain h5py, loads as it did."""
    import h5py
    import torch

    path = tmp_path / "ind000000000007.h5"
    bits = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
    with h5py.File(path, "w", track_order=True) as f:
        f.attrs["format"] = "atoll-weights"
        f.attrs["format_version"] = 1
        f.attrs["individual"] = 7
        f.attrs["params"] = '{"lr": 0.01, "act": "relu"}'
        f.create_dataset("fc/weight", data=np.arange(6.0).reshape(2, 3)).attrs["torch_dtype"] = \
            "float64"
        raw = bits.view(torch.int16).numpy().view(np.uint16)
        f.create_dataset("fc/bias", data=raw).attrs["torch_dtype"] = "bfloat16"
        assert h5py.check_string_dtype(f.attrs.get_id("format").dtype).length is None
    tensors = load_state_dict(path)
    assert sorted(tensors) == ["fc/bias", "fc/weight"]
    assert tensors["fc/weight"].tolist() == np.arange(6.0).reshape(2, 3).tolist()
    assert tensors["fc/bias"].dtype == torch.bfloat16 and torch.equal(tensors["fc/bias"], bits)
    assert load_attrs(path) == {"individual": 7, "params": '{"lr": 0.01, "act": "relu"}'}
    assert load_params(path) == {"lr": 0.01, "act": "relu"}


def test_a_weights_file_keeps_its_text_fixed_length(tmp_path):
    """No global heap: format, dtypes and attributes are fixed-length UTF-8 and read back."""
    import h5py
    import torch

    path = save_state_dict(tmp_path / "w.h5", {"a/b": torch.ones(2, dtype=torch.bfloat16)},
                           {"params": '{"name": "Zoë"}', "loss": 0.5})
    assert b"GCOL" not in path.read_bytes()
    with h5py.File(path) as f:
        assert h5py.check_string_dtype(f.attrs.get_id("params").dtype).length is not None
        assert f.attrs["format"] == b"atoll-weights"  # plain h5py: bytes
    assert load_params(path) == {"name": "Zoë"}
    assert load_state_dict(path)["a/b"].dtype == torch.bfloat16


@pytest.mark.slow  # a command search of many evaluations
def test_a_command_searchs_best_keep_their_scripts_checkpoint_directories(tmp_path):
    """A script keeps its own checkpoint (examples/train_script.py: state.npz after each
    epoch); the directories of the run's best top_models are kept in models/, the others go
    with their evaluations, and atoll.best names the best one's."""
    run_dir = tmp_path / "run"
    done = mpirun_atoll(
        2, "search", "--config", "examples/command.toml", "--run-dir", str(run_dir), "-q",
        "--set", "search.ranks_per_worker=1", "--set", "search.evaluations=6",
        "--set", "pruning.rule=none", "--set", "record.top_models=2")
    assert done.returncode == 0, done.stderr[-3000:]
    ind = open_run(run_dir).individuals
    assert (ind["status"] == int(Status.OK)).all(), ind["error"]
    best2 = ind[np.argsort(ind["loss"])[:2]]
    kept = sorted((run_dir / "models").iterdir())
    assert [p.name for p in kept] == [f"ind{i:012d}" for i in sorted(best2["id"])]
    for row in best2:
        with np.load(run_dir / "models" / f"ind{int(row['id']):012d}" / "state.npz",
                     allow_pickle=False) as state:
            assert int(state["epoch"]) == 4 and float(state["val_loss"]) == row["loss"]
    assert not list((run_dir / "checkpoints").glob("ind*"))  # every evaluation's went
    found = atoll.best(run_dir)
    assert found.weights == run_dir / "models" / f"ind{found.id:012d}"


def test_ddp_weights_lose_their_prefix_and_a_nan_loss_is_said(tmp_path):
    """ddp.state_dict() as offered (keys under ``module.``) is kept as the bare model's, so it
    loads into it; an offer with a NaN loss keeps nothing, said once."""
    run_dir = _search(tmp_path, 1, "misused_weights", "search.generations=3",
                      "record.top_models=3", said="ctx.keep_weights got loss nan")
    ind = open_run(run_dir).individuals
    for row in ind:
        kept = load_state_dict(run_dir / "models" / f"ind{int(row['id']):012d}.h5")
        assert sorted(kept) == ["b", "w"] and kept["w"].tolist() == [row["loss"]] * 3


def test_weights_offered_on_a_follower_only_are_said_lost_once(tmp_path):
    run_dir = _search(tmp_path, 2, "weights_on_a_follower", "search.ranks_per_worker=2",
                      "search.generations=3",
                      said="ctx.keep_weights was called on worker rank(s) 1 but not on rank 0, "
                           "whose call alone keeps weights: none were kept (said once per "
                           "worker); call it on rank 0 too")
    assert len(open_run(run_dir).individuals) == 3
    assert not list((run_dir / "models").glob("*.h5"))


def test_a_ctx_kept_past_its_call_is_refused_and_the_record_stays(tmp_path):
    run_dir = _search(tmp_path, 1, "misused_weights", "objective.options.keep_ctx=true",
                      "search.generations=3")
    run = open_run(run_dir)
    ind = run.individuals
    assert ind["status"].tolist() == [int(Status.OK), int(Status.FAILED), int(Status.FAILED)]
    assert ind["error"][1] == ("RuntimeError: ctx.report: this ctx is individual 0's, whose "
                               "evaluation has ended; use the ctx each call of the objective "
                               "gets")
    assert len(run.epochs) == 0  # nothing reported into individual 0's record
