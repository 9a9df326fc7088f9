"""Checkpoints with real processes: a 2-rank DDP worker under mpirun (gloo) saving, loading and
continuing; calls on some ranks only; kill -9 during a write; a full disk during a save."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from atoll.record import RunPaths
from atoll.record.checkpoints import CheckpointStore
from conftest import ROOT, mpi_env, mpirun_cmd, run

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """What each rank of one ``mpirun -n 2`` of tests/mpi_programs/checkpoint_checks.py saw;
    with a 1 MiB tmpfs for the full-disk case where this user may mount one."""
    base = tmp_path_factory.mktemp("checkpoints")
    disk = base / "disk"
    disk.mkdir()
    mounted = os.geteuid() == 0 and shutil.which("mount") is not None and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=False,
        capture_output=True).returncode == 0
    out = base / "facts.json"
    try:
        done = run(mpirun_cmd(2, str(ROOT / "tests" / "mpi_programs" / "checkpoint_checks.py"),
                              str(out), str(base), str(disk) if mounted else ""), timeout=240)
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(disk)], check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    yield {"ranks": json.loads(out.read_text()), "stderr": done.stderr, "base": base,
           "disk": disk if mounted else None}


def test_a_continued_ddp_evaluation_ends_as_one_never_stopped(worker):
    for rank in worker["ranks"]:
        whole, first, rest = rank["whole"], rank["first"], rank["rest"]
        assert [e["epoch"] for e in first["curve"]] == [0, 1]
        assert [e["epoch"] for e in rest["curve"]] == [2]  # numbered on, none redone
        assert first["curve"] + rest["curve"] == whole["curve"]  # bit for bit (JSON floats)
        assert rest["loss"] == whole["loss"] and rest["kept"] == whole["kept"]
        assert first["loss"] != whole["loss"]
    assert worker["ranks"][0]["rest"] == worker["ranks"][1]["rest"]


def test_the_user_example_continues_as_it_shows(worker):
    for rank in worker["ranks"]:
        whole, first, rest = (rank["example"][k] for k in ("whole", "first", "rest"))
        assert [e["epoch"] for e in rest["curve"]] == [2]
        assert first["curve"] + rest["curve"] == whole["curve"]
        assert rest["loss"] == whole["loss"] and rest["kept"] == whole["kept"]


def test_the_leader_writes_and_every_rank_loads_its_state(worker):
    for rank in worker["ranks"]:
        assert rank["misuse"]["proper_save"]["value"] is True
        assert rank["misuse"]["proper_load"] == {"epoch": 5, "rank": 0, "w": [0.0] * 4}


def test_a_state_the_leader_cannot_store_is_the_same_error_on_every_rank(worker):
    for rank in worker["ranks"]:
        assert rank["misuse"]["unstorable"]["error"] == (
            "ctx.save_checkpoint(epoch=0): TypeError: state['opt']: cannot store a set in a "
            "checkpoint (store tensors, arrays, numbers, strings, bytes, None, lists, tuples, "
            "dicts)")


ONE_RANK = """
import sys, torch
from mpi4py import MPI
from atoll.evaluation.context import WorkerServices
from atoll.evaluation.process_group import ProcessGroupOwner
from atoll.record import RunPaths
from atoll.record.checkpoints import CheckpointStore
services = WorkerServices(comm=MPI.COMM_SELF, group=ProcessGroupOwner(MPI.COMM_SELF),
                          checkpoints=CheckpointStore(RunPaths(sys.argv[1]), "run"))
print(services.context(4).load_checkpoint())
print(services.context(4).save_checkpoint({"w": torch.ones(2, dtype=torch.bfloat16)}, 3))
saved = services.context(4).load_checkpoint(map_location="cpu")
print(saved.epoch, saved.state["w"].dtype, saved.state["w"].tolist())
"""


def test_a_one_rank_worker_saves_and_loads_without_partners(tmp_path):
    done = run([sys.executable, "-c", ONE_RANK, str(tmp_path)], timeout=120, env=mpi_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["None", "True", "3 torch.bfloat16 [1.0, 1.0]"]


def test_a_call_on_some_ranks_only_is_one_error_naming_the_others_not_a_hang(worker):
    leader, follower = (r["misuse"] for r in worker["ranks"])
    saved = leader["leader_only_save"]
    assert saved["error"] == ("ctx.save_checkpoint(epoch=0) is collective, but not every rank of "
                              "the worker called it: rank 1 did not call it within "
                              "distributed.timeout = 2 s")
    assert 2.0 <= saved["seconds"] < 10
    for side in (leader, follower):  # the next call on every rank saves and loads
        assert side["then_every_rank"]["value"] is True, side["then_every_rank"]
        assert side["then_every_rank"]["seconds"] < 2
        assert side["then_loaded"] == 1
    loaded = follower["follower_only_load"]
    assert loaded["error"] == ("ctx.load_checkpoint() is collective, but not every rank of the "
                               "worker called it: rank 0 ended the evaluation without it")
    assert loaded["seconds"] < 10
    for side in (leader, follower):
        assert side["different_epochs"]["error"] == (
            "ctx.save_checkpoint(epoch=1) is collective, but not every rank of the worker called "
            "it: rank 1 called ctx.save_checkpoint(epoch=2) instead")


def test_damaged_and_foreign_checkpoints_restart_from_scratch_with_a_warning(worker):
    for rank in worker["ranks"]:
        assert rank["refused"] == {"damaged": True, "foreign": True}
    base = worker["base"]
    damaged = RunPaths(base / "parts").checkpoint_file(7)
    foreign = RunPaths(base / "foreign").checkpoint_file(7)
    assert f"{damaged}: not loaded (damaged: its checksum does not match" in worker["stderr"]
    assert f"{foreign}: not loaded (foreign: written for run another-run" in worker["stderr"]


def test_a_full_disk_during_a_save_keeps_the_previous_checkpoint_on_every_rank(worker):
    if worker["disk"] is None:
        pytest.skip("needs root and mount(8) to make a small real file system (tmpfs)")
    path = RunPaths(worker["disk"]).checkpoint_file(9)
    for rank in worker["ranks"]:
        assert rank["disk_full"]["small"] is True and rank["disk_full"]["big"] is False
        assert rank["disk_full"]["kept"] == [0, 0.0]
    # the leader reported it (a job then stops with exit 74); the other rank wrote nothing
    assert worker["ranks"][0]["disk_full"]["reported"] == f"{path}: no space left on device"
    assert worker["ranks"][1]["disk_full"]["reported"] == ""


WRITER = """
import sys, torch
from atoll.record import RunPaths
from atoll.record.checkpoints import CheckpointStore
store = CheckpointStore(RunPaths(sys.argv[1]), "run")
for epoch in range(1000):
    store.save(1, epoch, {"w": torch.full((6_000_000,), float(epoch)), "epoch": epoch})
    print(epoch, flush=True)
"""


@pytest.mark.parametrize("written", [1, 8_000_000])
def test_kill_9_during_a_write_leaves_the_previous_checkpoint(tmp_path, written):
    """A writer of 24 MB checkpoints, killed once its first save is done and the temporary file
    of a later one holds ``written`` bytes: the checkpoint left loads, whole, at the last epoch
    the writer finished."""
    paths = RunPaths(tmp_path)
    temp = paths.temp_for(paths.checkpoint_file(1))
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE,
                            text=True, env=mpi_env(), start_new_session=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "0"
    deadline = time.monotonic() + 60
    while not (temp.exists() and temp.stat().st_size >= written):
        assert time.monotonic() < deadline, "the writer never wrote a second checkpoint"
        time.sleep(0.0005)
    os.kill(proc.pid, signal.SIGKILL)  # at once: the writer has no children
    proc.wait()
    done = [0, *(int(line) for line in proc.stdout.read().split())]
    assert temp.exists()  # killed in the middle of a write
    loaded = CheckpointStore(paths, "run").load(1)
    assert loaded is not None and loaded.epoch == done[-1]
    assert loaded.state["epoch"] == loaded.epoch
    assert bool((loaded.state["w"] == float(loaded.epoch)).all())
    assert CheckpointStore(paths, "run").save(1, 99, {"w": 0})  # the next save goes on
    assert not temp.exists() and CheckpointStore(paths, "run").load(1).epoch == 99
