"""A full disk is a stop with exit 74, one line, no temporary files and no crash; after space is
freed a resume reaches the budget. On a real small file system (tmpfs, mounted as root)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from atoll.exit_codes import EXIT_DISK_FULL
from atoll.record import open_run
from conftest import ROOT, mpi_env, mpirun_atoll, run

CONFIG = "examples/sphere.toml"
CRASHES = ("Traceback", "Segmentation fault", "PeerError", "HDF5-DIAG")


def _mount(where: Path, size: str) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                   check=True, capture_output=True, text=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, unmounted afterwards; a visible skip where mounting is not allowed."""
    where = tmp_path / "disk"
    where.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("needs root and mount(8) to make a small real file system (tmpfs)")
    try:
        _mount(where, "1m")
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot mount a tmpfs here ({exc.stderr.strip()}): no small real disk")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _grow(disk: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(disk)], check=True)


def _leftovers(run_dir: Path) -> list[Path]:
    return [p for p in run_dir.rglob("*") if p.name.endswith(".tmp")]


def _assert_stopped_full(done: subprocess.CompletedProcess[str], where: str) -> None:
    assert done.returncode == EXIT_DISK_FULL, done.stderr[:6000]
    errors = [line for line in done.stderr.splitlines() if line.startswith("atoll: error:")]
    assert len(errors) == 1, done.stderr[-3000:]
    assert "disk full" in errors[0] and where in errors[0] and "atoll resume" in errors[0]
    assert not any(crash in done.stderr for crash in CRASHES), done.stderr[-3000:]


def test_disk_full_mid_run_and_in_results_stops_with_74_and_resumes_to_the_budget(small_disk):
    run_dir = small_disk / "run"
    budget = 2 * 6000  # about twice what fits in 1 MiB
    full = mpirun_atoll(2, "search", "--config", CONFIG, "--run-dir", str(run_dir), "-q",
                        "--set", "search.generations=6000", "--set", "record.flush_interval=0.05")
    # full while the workers flush: the first file that did not fit is named
    _assert_stopped_full(full, f"{run_dir}/workers/job000-worker0000")
    assert not _leftovers(run_dir)
    record = open_run(run_dir)  # the committed rows are readable
    ids = record.individuals["id"]
    assert 0 < len(ids) < budget and len(np.unique(ids)) == len(ids)
    assert record.jobs["exit_code"].tolist() == [EXIT_DISK_FULL]

    _grow(small_disk, "64m")
    done = mpirun_atoll(2, "resume", str(run_dir), "-q")
    assert done.returncode == 0, done.stderr[-3000:]
    record = open_run(run_dir)
    assert len(record.individuals) == budget == len(np.unique(record.individuals["id"]))
    assert (run_dir / "results.h5").is_file()

    # full while writing results.h5 only: one worker's probe (256 KiB, record.check_room,
    # written and removed), its file and its few rows fit, a new results.h5 beside them does
    # not: room for the old one and 10 kB more
    before = (run_dir / "results.h5").stat()
    left = before.st_size + 10_000
    assert left > 300_000  # the probe fits
    stat = os.statvfs(small_disk)
    (small_disk / "filler").write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - left))
    more = mpirun_atoll(1, "resume", str(run_dir), "-q", "--set", "search.islands=1",
                        "--set", f"search.evaluations={budget + 20}")
    _assert_stopped_full(more, f"{run_dir}/results.h5")
    assert not _leftovers(run_dir)
    assert (run_dir / "results.h5").stat().st_mtime_ns == before.st_mtime_ns  # the old one, whole
    record = open_run(run_dir)
    assert record.jobs["exit_code"].tolist() == [EXIT_DISK_FULL, 0, EXIT_DISK_FULL]  # not 0
    assert len(record.individuals) == budget + 20

    (small_disk / "filler").unlink()
    done = mpirun_atoll(2, "resume", str(run_dir), "-q")  # nothing left to evaluate ...
    assert done.returncode == 0, done.stderr[-3000:]
    with open_results(run_dir) as rows:  # ... but results.h5 is written now, with every row
        assert rows == budget + 20


class open_results:  # noqa: N801 - a tiny context manager for the row count of results.h5
    def __init__(self, run_dir: Path) -> None:
        import h5py

        self._f = h5py.File(run_dir / "results.h5", "r")

    def __enter__(self) -> int:
        return len(self._f["individuals"])

    def __exit__(self, *exc: object) -> None:
        self._f.close()


ABANDON = """
import sys
from pathlib import Path
import h5py
from atoll.config import load_config
from atoll.record.writer import WorkerLog
space = load_config(Path(sys.argv[2]), []).space
log = WorkerLog(Path(sys.argv[1]), space, job=0, worker=0, flush_interval=0)
i = 0
while not log.full:
    for _ in range(200):
        log.add_epoch(i, 0, 1.0, {"m": 1.0})
        i += 1
    log.flush()
log.close()
print(log.full)
"""


def test_a_worker_log_on_a_full_disk_is_abandoned_without_a_crash(small_disk):
    """h5py crashes (exit 139) closing a file whose write failed; an abandoned one does not,
    and keeps its committed rows."""
    path = small_disk / "w.h5"
    (small_disk / "filler").write_bytes(b"\0" * 700_000)
    done = run([sys.executable, "-c", ABANDON, str(path), str(ROOT / CONFIG)], timeout=60,
               env=mpi_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == f"{path}: no space left on device"
    stat = os.statvfs(small_disk)  # it stopped before a write could fail halfway
    assert stat.f_bavail * stat.f_frsize >= 32 * 1024
    import h5py

    with h5py.File(path, "r", swmr=True) as f:  # as after a kill
        assert 0 < int(f["epochs"].attrs["rows"]) <= len(f["epochs"])


WEIGHTS = """
import sys
from pathlib import Path
import torch
from atoll.record import full
from atoll.record.models import save_state_dict
try:
    save_state_dict(Path(sys.argv[1]), {"w": torch.zeros(400_000)})
except full.DiskFull as exc:
    print(exc, "|", full.seen())
"""


def test_a_weight_file_that_does_not_fit_is_one_report_and_no_file(small_disk):
    """Weight files (and results.h5) are built in memory and written with plain writes: a full
    disk is a DiskFull that the job hears of, with no file or temporary file left."""
    path = small_disk / "models" / "ind1.h5"
    path.parent.mkdir()
    done = run([sys.executable, "-c", WEIGHTS, str(path)], timeout=60, env=mpi_env())
    assert done.returncode == 0, done.stderr[-3000:]
    line = f"{path}: no space left on device"
    assert done.stdout.strip() == f"{line} | {line}"
    assert list(path.parent.iterdir()) == []


CHECKPOINTS = """
import sys, torch
from atoll.record import RunPaths, full
from atoll.record.checkpoints import CheckpointStore
store = CheckpointStore(RunPaths(sys.argv[1]), "run")
store.save(1, 0, {"w": torch.zeros(20_000)})
try:
    store.save(1, 1, {"w": torch.ones(400_000)})
except full.DiskFull as exc:
    print(exc, "|", full.seen())
print(store.load(1).epoch, bool((store.load(1).state["w"] == 0).all()))
"""


def test_a_checkpoint_that_does_not_fit_keeps_the_previous_one(small_disk):
    """A save that meets a full disk is one report (the job stops with 74) and leaves the
    individual's previous checkpoint whole, with no temporary file."""
    done = run([sys.executable, "-c", CHECKPOINTS, str(small_disk)], timeout=60, env=mpi_env())
    assert done.returncode == 0, done.stderr[-3000:]
    path = small_disk / "checkpoints" / "ind000000000001.h5"
    line = f"{path}: no space left on device"
    assert done.stdout.splitlines() == [f"{line} | {line}", "0 True"]
    assert [p.name for p in path.parent.iterdir()] == [path.name]
