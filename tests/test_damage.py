"""Damage to the files of real runs, read by every reader as users run them.

A reader meets damage in one line naming the file and exit 2, within seconds, whatever state
the run was left in: a worker file of a job killed with ``kill -9`` is still marked open for
writing, and HDF5 retries every unreadable piece of such a file (which hung every reader for
hours). Each command runs as a real subprocess under a timeout that fails the test.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import h5py
import pytest

from atoll.engine.restore import completed_count
from atoll.record import open_run
from conftest import ROOT, atoll_cmd, kill_tree, mpi_env, mpirun_cmd, run
from damage_checks import refused

SLOW_CONFIG = "tests/configs/slow_sphere.toml"
READERS = [("inspect",), ("report",), ("resume",)]
QUICK = 20.0  # seconds a reader may take on damage: a process start, a second of retries


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4-rank search killed with SIGKILL once each worker has flushed rows."""
    run_dir = tmp_path_factory.mktemp("killed") / "run"
    cmd = mpirun_cmd(4, "-m", "atoll", "search", "--config", SLOW_CONFIG, "--run-dir",
                     str(run_dir), "--set", "search.generations=1000",
                     "--set", "record.flush_interval=0.2")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=mpi_env(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            files = list(run_dir.glob("workers/*.h5"))
            if len(files) == 4 and completed_count(open_run(run_dir).individuals) >= 40:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the search ended before it was killed"
    finally:
        kill_tree(proc)
    assert len(list(run_dir.glob("workers/*.h5"))) == 4
    return run_dir


def flip_header_bytes(path: Path, table: str = "individuals") -> None:
    """Invert 8 bytes inside the object header of ``table``: its checksum no longer matches."""
    with h5py.File(path, "r", swmr=True, locking=False) as f:
        address = h5py.h5o.get_info(f[table].id).addr
    with open(path, "r+b") as handle:
        handle.seek(address + 16)
        data = handle.read(8)
        handle.seek(address + 16)
        handle.write(bytes(b ^ 0xFF for b in data))


def overwrite_loss(path: Path, row: int = 2, value: float = -1e300) -> None:
    """Overwrite one committed loss in the file's bytes (h5py cannot write a file marked open
    for writing): the best loss of the run, were it believed."""
    with h5py.File(path, "r", swmr=True, locking=False) as f:
        ds = f["individuals"]
        assert ds.attrs["rows"] > row
        kind = ds.id.get_type()
        where = ds.id.get_chunk_info(0).byte_offset + row * kind.get_size() \
            + kind.get_member_offset(kind.get_member_index(b"loss"))
    with open(path, "r+b") as handle:
        handle.seek(where)
        handle.write(struct.pack("<d", value))


@pytest.mark.parametrize("argv", READERS, ids=[a[0] for a in READERS])
def test_a_changed_value_in_a_killed_jobs_rows_is_refused_by_every_reader(
        tmp_path: Path, killed_run: Path, argv: tuple[str, ...]) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(killed_run, run_dir)
    damaged = run_dir / "workers" / "job000-worker00002.h5"
    overwrite_loss(damaged)
    line = refused(run_dir, argv)
    assert line.startswith(f"atoll: error: {damaged}: table 'individuals': rows 0 to "), line
    assert line.endswith(" do not match their checksum (a value in them changed after it was "
                         "written): the file is damaged; restore it from a backup, or move it "
                         "out of the run directory"), line


@pytest.mark.parametrize("argv", READERS, ids=[a[0] for a in READERS])
def test_a_damaged_file_of_a_killed_job_ends_every_reader_in_seconds(
        tmp_path: Path, killed_run: Path, argv: tuple[str, ...]) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(killed_run, run_dir)
    damaged = run_dir / "workers" / "job000-worker00001.h5"
    with pytest.raises(OSError, match="already open for write"):  # marked open by its writer
        h5py.File(damaged, "r", locking=False)
    flip_header_bytes(damaged)
    start = time.monotonic()
    line = refused(run_dir, argv)
    took = time.monotonic() - start
    assert took < QUICK, f"{argv[0]} took {took:.0f} s on a damaged file"
    hint = "resume without its rows" if argv[0] == "resume" else "read the rest of the run"
    assert line == (
        f"atoll: error: {damaged}: damaged ('Unable to synchronously open object (incorrect "
        f"metadata checksum after all read attempts)'); move it out of {damaged.parent} to "
        f"{hint}"), line
    assert os.path.exists(damaged)


def flip_text(path: Path, text: bytes) -> None:
    """Invert 8 bytes in the middle of ``text`` where ``path`` stores it."""
    data = bytearray(path.read_bytes())
    at = data.find(text)
    assert at >= 0 and len(text) >= 16, "the text is not stored as it is"
    for k in range(at + len(text) // 2 - 4, at + len(text) // 2 + 4):
        data[k] ^= 0xFF
    path.write_bytes(data)


@pytest.mark.parametrize("argv", READERS, ids=[a[0] for a in READERS])
def test_changed_text_in_run_h5_is_refused_by_every_reader(
        tmp_path: Path, finished_run: Path, argv: tuple[str, ...]) -> None:
    """Text attributes (the config, here) are checksummed with HDF5's metadata: in its global
    heap, as variable-length strings, a changed byte was read as it was."""
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    run_file = run_dir / "run.h5"
    flip_text(run_file, open_run(run_dir).metadata["config"].encode()[:64])
    line = refused(run_dir, argv)
    assert line.startswith(f"atoll: error: {run_file}: damaged ("), line


@pytest.mark.parametrize("argv", READERS, ids=[a[0] for a in READERS])
def test_changed_text_in_run_h5s_jobs_is_refused_by_every_reader(
        tmp_path: Path, finished_run: Path, argv: tuple[str, ...]) -> None:
    """run.h5 and results.h5 are written whole, their text in fixed-length columns that the
    tables' checksums cover: no global heap (unchecked; a damaged header there loops HDF5)."""
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    run_file = run_dir / "run.h5"
    for whole in (run_file, run_dir / "results.h5"):
        assert b"GCOL" not in whole.read_bytes()  # a global heap collection's signature
    flip_text(run_file, open_run(run_dir).jobs["layout"][0].encode()[:64])
    line = refused(run_dir, argv)
    assert line.startswith(f"atoll: error: {run_file}: table 'jobs'") and "damaged" in line, line


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    done = run(atoll_cmd("search", "--config", SLOW_CONFIG, "--run-dir", str(run_dir),
                         "--set", "search.generations=4"), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return run_dir


def garbage(path: Path) -> None:
    path.write_bytes(b"not hdf5 at all\n" * 64)


def changed_loss(path: Path) -> None:
    with h5py.File(path, "r+") as f:
        rows = f["individuals"][:]
        rows["loss"][1] = -1e300
        f["individuals"][...] = rows


@pytest.mark.parametrize("damage", [garbage, changed_loss])
def test_a_damaged_results_file_is_said_and_resume_writes_it_again(
        tmp_path: Path, finished_run: Path, damage: Callable[[Path], None]) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    results = run_dir / "results.h5"
    damage(results)
    warning = f"Warning: {results}: "
    hint = f"; 'atoll resume {run_dir}' writes it again from the worker files"
    for argv in (("inspect",), ("report", "--no-plots")):
        done = run(atoll_cmd(*argv, str(run_dir)), timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        said = [line for line in done.stdout.splitlines() if line.startswith(warning)]
        assert len(said) == 1 and said[0].endswith(hint), done.stdout

    done = run(atoll_cmd("resume", str(run_dir)), timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{results}: " in done.stderr and "; writing it again from the worker files" \
        in done.stderr, done.stderr
    rebuilt, workers = open_run(results), open_run(run_dir)
    assert rebuilt.metadata["source"] == "results"
    assert rebuilt.individuals.tolist() == workers.individuals.tolist()
    assert "warning" not in workers.metadata
