"""Checkpoints in one process: training states through HDF5 bit for bit, and the store's files
(whole, checked, foreign ones refused, bounded)."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import random
import shutil
import struct

import h5py
import numpy as np
import pytest
import torch
from torch import nn

from atoll.config import load_config
from atoll.errors import ConfigError, RecordError
from atoll.record import RunPaths, check_room
from atoll.record.checkpoints import MB, CheckpointStore, checkpoint_bytes
from atoll.record.state import read_state, write_state
from conftest import file_syncs

NAN_WITH_PAYLOAD = struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_00AB_CDEF))[0]


def round_trip(value, map_location=None):
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        write_state(f, "state", value)
    with h5py.File(buffer, "r") as f:
        return read_state(f["state"], map_location)


def same(a, b) -> bool:
    """Equal with the same types, keys in the same order, tensors and floats bit for bit."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        keys_alike = all(type(k) is type(j) for k, j in zip(a, b, strict=False))
        return list(a) == list(b) and keys_alike and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and a.device == b.device and \
            a.requires_grad == b.requires_grad and \
            bytes(a.detach().contiguous().view(-1).view(torch.uint8).numpy()) == \
            bytes(b.detach().contiguous().view(-1).view(torch.uint8).numpy())
    if isinstance(a, np.ndarray | np.generic):
        return a.dtype == b.dtype and np.shape(a) == np.shape(b) and a.tobytes() == b.tobytes()
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    return bool(a == b)


def trained(steps: int = 3, seed: int = 0):
    """A model with Adam, a scheduler and a GradScaler after ``steps`` steps."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.BatchNorm1d(7), nn.Linear(7, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01, amsgrad=True)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for _ in range(steps):
        step(model, opt)
        sched.step()
    return model, opt, sched


def step(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    opt.zero_grad()
    model(torch.randn(8, 5)).square().mean().backward()
    opt.step()


def full_state():
    model, opt, sched = trained()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    return {"model": model.state_dict(), "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(), "scaler": scaler.state_dict(), "epoch": 3,
            "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                    "generator": np.random.default_rng(7).bit_generator.state,
                    "python": random.getstate()}}


def test_a_training_state_round_trips_bit_for_bit():
    state = full_state()
    back = round_trip(state)
    assert same(back["model"], dict(state["model"]))
    assert same(back["optimizer"], state["optimizer"])  # int keys stay ints
    assert 0 in back["optimizer"]["state"] and back["optimizer"]["param_groups"][0]["amsgrad"]
    for key in ("scheduler", "scaler", "epoch"):
        assert same(back[key], state[key])
    for key in ("torch", "generator", "python"):
        assert same(back["rng"][key], state["rng"][key])
    assert same(list(back["rng"]["numpy"]), list(state["rng"]["numpy"]))
    random.setstate(back["rng"]["python"])  # usable as it is
    np.random.default_rng().bit_generator.state = back["rng"]["generator"]


def test_awkward_values_round_trip_exactly():
    value = {"": [None, True, -0.0, NAN_WITH_PAYLOAD, float("inf"), 2**130, -(2**70), "a\0é",
                  b"", b"\0\xff", (), [], {}, (1, 2**63), np.float32(-0.0), np.arange(3.0)],
             7: {"a/b": torch.randn(2, 3).to(torch.bfloat16),
                 "half": torch.tensor([-0.0, float("nan")], dtype=torch.float16),
                 "bool": torch.tensor([True, False]), "scalar": torch.tensor(5),
                 "grad": torch.ones(2, requires_grad=True), "empty": torch.zeros(0, 3),
                 "c": torch.randn(2, dtype=torch.complex64),
                 "view": torch.arange(12.0).reshape(3, 4).t()}}
    back = round_trip(value)
    expected = dict(value)
    expected[7] = {k: v.contiguous() if k == "view" else v for k, v in value[7].items()}
    assert same(back, expected)


def test_tensors_load_onto_the_device_asked_for():
    back = round_trip({"w": torch.ones(2, dtype=torch.bfloat16)}, map_location="cpu")
    assert back["w"].device == torch.device("cpu") and back["w"].dtype == torch.bfloat16


def test_what_cannot_be_stored_is_named():
    with pytest.raises(TypeError, match=r"state\['opt'\]\[0\]: cannot store a set"):
        round_trip({"opt": [{1, 2}]})
    with pytest.raises(TypeError, match="key 1.5 is a float"):
        round_trip({1.5: 0})
    with pytest.raises(TypeError, match="sparse"):
        round_trip({"s": torch.eye(2).to_sparse()})


def test_a_restored_optimizer_steps_exactly_like_the_one_never_saved():
    model, opt, sched = trained(steps=4)
    saved = round_trip({"model": model.state_dict(), "opt": opt.state_dict(),
                        "sched": sched.state_dict(), "rng": torch.get_rng_state()})
    twin, twin_opt, twin_sched = trained(steps=0, seed=1)
    twin.load_state_dict(saved["model"])
    twin_opt.load_state_dict(saved["opt"])
    twin_sched.load_state_dict(saved["sched"])
    for _ in range(3):
        rng = torch.get_rng_state()
        step(model, opt)
        sched.step()
        torch.set_rng_state(rng)
        step(twin, twin_opt)
        twin_sched.step()
    assert same(dict(twin.state_dict()), dict(model.state_dict()))
    assert same(twin_opt.state_dict(), opt.state_dict())
    assert twin_sched.get_last_lr() == sched.get_last_lr()


# -- the store --------------------------------------------------------------------------------

def test_the_store_keeps_one_checked_file_per_individual(tmp_path):
    paths = RunPaths(tmp_path)
    store = CheckpointStore(paths, "run-a")
    assert store.load(3) is None
    state = full_state()
    assert store.save(3, 1, {"old": 1}) and store.save(3, 2, state)
    loaded = store.load(3)
    assert loaded is not None and loaded.epoch == 2 and same(loaded.state["optimizer"],
                                                               state["optimizer"])
    assert list(paths.checkpoint_files()) == [3]
    assert not list(paths.checkpoints_dir.glob(".*"))  # no temporary file left
    with h5py.File(paths.checkpoint_file(3), "r") as f:  # plain h5py reads it
        assert f.attrs["run_id"].decode() == "run-a" and f.attrs["individual"] == 3
    assert b"GCOL" not in paths.checkpoint_file(3).read_bytes()  # no global heap: text is fixed
    store.discard(3)
    assert store.load(3) is None and paths.checkpoint_files() == {}


def write_old_checkpoint(path, run_id: str, ident: int, epoch: int) -> None:
    """A checkpoint as Atoll wrote it before: every text a variable-length string (in the
    file's global heap), the user block holding the SHA-256 of the rest."""
    buffer = io.BytesIO()
    text = h5py.string_dtype()
    with h5py.File(buffer, "w", userblock_size=512) as f:
        for name, value in (("kind", "atoll-checkpoint"), ("run_id", run_id),
                            ("about", json.dumps({"params": {"x": 0.5}}))):
            f.attrs.create(name, value, dtype=text)
        f.attrs.update(format_version=1, individual=ident, epoch=epoch, saved=0.0)
        state = f.create_group("state")
        state.attrs.create("type", "dict", dtype=text)
        for i, (key, value, kind) in enumerate((("w", torch.arange(3.0), "tensor"),
                                                 (7, "é", "str"), ("n", None, "none"))):
            if value is None:
                node = state.create_group(str(i))
            else:
                data = value.numpy() if kind == "tensor" else np.frombuffer(value.encode(),
                                                                            np.uint8)
                node = state.create_dataset(str(i), data=data)
            for name, attr in (("type", kind), ("key", str(key)),
                               ("key_type", type(key).__name__)):
                node.attrs.create(name, attr, dtype=text)
            if kind == "tensor":
                node.attrs.create("torch_dtype", "float32", dtype=text)
                node.attrs["requires_grad"] = False
    data = buffer.getbuffer()
    header = b"ATOLL-CHECKPOINT sha256 " + hashlib.sha256(data[512:]).hexdigest().encode() + b"\n"
    data[:len(header)] = header
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_a_checkpoint_written_with_variable_length_strings_still_loads(tmp_path):
    paths = RunPaths(tmp_path)
    write_old_checkpoint(paths.checkpoint_file(4), "run-a", 4, 2)
    assert b"GCOL" in paths.checkpoint_file(4).read_bytes()  # it has a global heap
    loaded = CheckpointStore(paths, "run-a").load(4)
    assert loaded is not None and loaded.epoch == 2
    assert same(loaded.state, {"w": torch.arange(3.0), 7: "é", "n": None})
    assert [u.about for u in CheckpointStore(paths, "run-a").unrecorded(set())] == \
        [{"params": {"x": 0.5}}]
    assert CheckpointStore(paths, "run-b").load(4) is None  # its run id is read, too


def test_a_key_with_a_nul_character_is_named():
    with pytest.raises(TypeError, match=r"state: key 'a\\x00' holds a NUL character"):
        round_trip({"a\0": 1})


@pytest.mark.parametrize("damage", ["flip a byte", "truncate", "zero the header"])
def test_a_damaged_checkpoint_is_not_loaded_and_named(tmp_path, caplog, damage):
    store = CheckpointStore(RunPaths(tmp_path), "run-a")
    store.save(5, 4, {"w": torch.arange(1000.0)})
    path = store.paths.checkpoint_file(5)
    data = bytearray(path.read_bytes())
    if damage == "flip a byte":
        data[len(data) // 2] ^= 0x01
    elif damage == "truncate":
        data = data[: len(data) - 100]
    else:
        data[:64] = bytes(64)
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        assert store.load(5) is None
    assert f"{path}: not loaded" in caplog.text and "starts from scratch" in caplog.text


def test_a_foreign_checkpoint_is_not_loaded(tmp_path, caplog):
    paths = RunPaths(tmp_path)
    CheckpointStore(paths, "other-run").save(5, 4, {"w": 1})
    with caplog.at_level(logging.WARNING):
        assert CheckpointStore(paths, "run-a").load(5) is None
    assert "foreign: written for run other-run" in caplog.text
    paths.checkpoint_file(5).rename(paths.checkpoint_file(6))  # another individual's
    assert CheckpointStore(paths, "other-run").load(6) is None
    assert "individual 5 (this is run other-run, individual 6)" in caplog.text


def test_the_size_limit_keeps_the_previous_checkpoint_and_warns(tmp_path, caplog):
    paths = RunPaths(tmp_path)
    store = CheckpointStore(paths, "run-a", limit_mb=0.5)
    assert store.save(1, 0, {"w": torch.zeros(50_000)})  # 200 kB
    assert store.save(1, 1, {"w": torch.ones(50_000)})  # replaces its own: still fits
    with caplog.at_level(logging.WARNING):
        assert not store.save(2, 0, {"w": torch.zeros(100_000)})
    assert "record.checkpoint_limit_mb = 0.5" in caplog.text
    assert list(paths.checkpoint_files()) == [1]
    assert checkpoint_bytes(paths)[0] > 200_000


def test_the_limit_setting_is_validated(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('[objective]\nname = "sphere"\n[record]\ncheckpoint_limit_mb = -1\n')
    with pytest.raises(ConfigError, match="record.checkpoint_limit_mb: expected a number >= 0"):
        load_config(config)


def test_the_free_space_check_counts_checkpoints(tmp_path):
    paths = RunPaths(tmp_path)
    paths.workers_dir.mkdir()
    check_room(paths, workers=2)
    paths.checkpoints_dir.mkdir()
    free = shutil.disk_usage(tmp_path).free
    with open(paths.checkpoint_file(1), "wb") as f:  # sparse: as large as the disk is free
        f.truncate(free // 2 + MB)
    with pytest.raises(RecordError, match=r"checkpoints: \d+ MB free, but each of the 2 workers"):
        check_room(paths, workers=2)
    check_room(paths, workers=1)


def test_a_checkpoint_is_durable_before_its_rename_and_the_rename_after_it(tmp_path, monkeypatch):
    """A crash of the node (not only of the job) keeps either the old checkpoint or the new
    one: the file is synced before it replaces the old, and its directory after."""
    events = file_syncs(monkeypatch)
    paths = RunPaths(tmp_path)
    CheckpointStore(paths, "run").save(3, 1, {"w": np.ones(4)})
    saved = str(paths.checkpoint_file(3))
    assert [kind for kind, _ in events] == ["fsync", "replace", "fsync"]
    assert events[0][1].startswith(str(paths.checkpoints_dir)) and events[0][1] != saved
    assert events[1:] == [("replace", saved), ("fsync", str(paths.checkpoints_dir))]
