"""Text in worker files: error texts and categorical values are checked like the rest of a row.

Worker files kept them as variable-length strings in HDF5's global heap, which nothing
checksums: a changed byte was read as it was. Now categorical columns are fixed-length and the
error texts a byte stream the ``checksum`` attribute covers; worker files of version 1 (a run
started by an earlier Atoll) are still read and resumed. Real runs, real files, readers as
users run them, each under a timeout that fails the test.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest

import atoll
from atoll.engine.restore import completed_count
from atoll.errors import RecordError
from atoll.evaluation.call import ERROR_CHARS
from atoll.individual import Individual, Status
from atoll.record import WorkerLog, open_run
from atoll.record._h5 import SWMR_LIBVER, WORKER_KIND, open_h5
from atoll.record.commits import checksum, checksum_value, committed
from atoll.record.models import load_params
from atoll.space import Space
from conftest import ROOT, atoll_cmd, kill_tree, mpi_env, mpirun_atoll, mpirun_cmd, run
from damage_checks import refused

CONFIG = "tests/configs/report.toml"  # failures (error texts) and a categorical parameter
READERS = [("inspect",), ("report",), ("resume",)]
HEAP = b"GCOL"  # the signature of a global heap collection


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    done = run(atoll_cmd("search", "--config", CONFIG, "--run-dir", str(run_dir)), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return run_dir


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4-rank search killed with SIGKILL once its files hold failed individuals."""
    run_dir = tmp_path_factory.mktemp("killed") / "run"
    cmd = mpirun_cmd(4, "-m", "atoll", "search", "--config", CONFIG, "--run-dir", str(run_dir),
                     "--set", "search.generations=1000", "--set", "record.flush_interval=0.2")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=mpi_env(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            if len(list(run_dir.glob("workers/*.h5"))) == 4:
                with contextlib.suppress(RecordError):  # met while a new metric replaced it
                    ind = open_run(run_dir).individuals
                    if completed_count(ind) >= 40 and (ind["status"] == int(Status.FAILED)).any():
                        break
            time.sleep(0.2)
        assert proc.poll() is None, "the search ended before it was killed"
    finally:
        kill_tree(proc)
    return run_dir


def failed_row(path: Path) -> int | None:
    """A committed row of ``path`` with an error text, or None."""
    with h5py.File(path, "r", swmr=True, locking=False) as f:
        ds = f["individuals"]
        covered = int(ds.attrs["checksum"][0])
        found = np.flatnonzero(ds.fields("error")[:covered] > 0)
    return int(found[0]) if len(found) else None


def value_at(path: Path, row: int, column: str = "act") -> int:
    """Where ``path`` keeps ``column`` of row ``row`` of its individuals."""
    with h5py.File(path, "r", swmr=True, locking=False) as f:
        ds = f["individuals"]
        kind, chunk = ds.id.get_type(), ds.chunks[0]
        start = ds.id.get_chunk_info_by_coord((row // chunk * chunk,)).byte_offset
        return start + row % chunk * kind.get_size() \
            + kind.get_member_offset(kind.get_member_index(column.encode()))


def text_at(path: Path, row: int) -> int:
    """Where ``path`` keeps the 13th byte of row ``row``'s error text."""
    with h5py.File(path, "r", swmr=True, locking=False) as f:
        begin = int(f["individuals"].fields("error")[:row].sum()) + 12
        stream = f["error_text"]
        chunk = stream.chunks[0]
        return stream.id.get_chunk_info_by_coord((begin // chunk * chunk,)).byte_offset \
            + begin % chunk


def change_byte(path: Path, at: int) -> None:
    """Turn one letter's case: still valid UTF-8, still plausible, so only a checksum sees it."""
    data = bytearray(path.read_bytes())
    assert chr(data[at]).isalpha(), data[at - 12: at + 12]
    data[at] ^= 0x20
    path.write_bytes(data)


def damage_text(path: Path) -> str:
    row = failed_row(path)
    assert row is not None
    change_byte(path, text_at(path, row))
    return "the error texts of rows 0 to "


def damage_choice(path: Path) -> str:
    change_byte(path, value_at(path, 0))
    return "rows 0 to "


DAMAGE = [damage_text, damage_choice]


@pytest.mark.parametrize("argv", READERS, ids=[a[0] for a in READERS])
@pytest.mark.parametrize("damage", DAMAGE, ids=["error", "categorical"])
@pytest.mark.parametrize("which", ["finished", "killed"])
def test_a_changed_byte_of_text_in_a_worker_file_is_refused_by_every_reader(
        tmp_path: Path, request: pytest.FixtureRequest, which: str,
        damage: Callable[[Path], str], argv: tuple[str, ...]) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(request.getfixturevalue(f"{which}_run"), run_dir)
    damaged = next(p for p in sorted(run_dir.glob("workers/*.h5")) if failed_row(p) is not None)
    what = damage(damaged)
    line = refused(run_dir, argv)
    assert line.startswith(f"atoll: error: {damaged}: table 'individuals': {what}"), line
    assert line.endswith(" changed after it was written): the file is damaged; restore it from "
                         "a backup, or move it out of the run directory"), line


@pytest.mark.parametrize("which", ["finished", "killed"])
def test_worker_files_have_no_global_heap(request: pytest.FixtureRequest, which: str) -> None:
    run_dir = request.getfixturevalue(f"{which}_run")
    ind = open_run(run_dir).individuals
    failed = ind["error"][ind["status"] == int(Status.FAILED)]
    assert len(failed) and all(e == "ValueError: report_demo failed on purpose" for e in failed)
    assert set(ind["act"]) <= {"relu", "tanh", "sigmoid"} and len(set(ind["act"])) > 1
    workers = list(run_dir.glob("workers/*.h5"))
    assert workers and all(HEAP not in p.read_bytes() for p in workers)
    if which == "finished":
        assert HEAP not in (run_dir / "results.h5").read_bytes()


def test_a_run_with_kept_checkpoints_has_no_global_heap(tmp_path: Path) -> None:
    """Checkpoints (kept for children to inherit) write their text fixed-length too: no file
    of the run directory has a global heap."""
    config = tmp_path / "atoll.toml"
    config.write_text('seed = 3\n[objective]\nname = "objectives:lineage_demo"\n'
                      '[space.x0]\ntype = "float"\nlow = -1.0\nhigh = 1.0\n'
                      '[search]\nevaluations = 8\nislands = 1\n[evolution]\nstrategy = "ga"\n'
                      '[inherit]\nenabled = true\nkeep = 2\n')
    run_dir = tmp_path / "run"
    done = mpirun_atoll(2, "search", "-q", "--config", str(config), "--run-dir", str(run_dir),
                        timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    kept = list((run_dir / "checkpoints").glob("*.h5"))
    assert kept, sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {p for p in files if HEAP in p.read_bytes()} == set()


def test_a_run_that_keeps_weights_has_no_global_heap(tmp_path: Path) -> None:
    """Weight files (``ctx.keep_weights``) write their text fixed-length too: format, torch
    dtypes, the individual's parameters."""
    run_dir = tmp_path / "run"
    done = mpirun_atoll(2, "search", "-q", "--config", "tests/configs/slow_sphere.toml",
                        "--run-dir", str(run_dir), "--set",
                        "objective.name=objectives:offers_every_epoch", "--set",
                        "search.evaluations=6", "--set", "record.top_models=2", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    kept = list((run_dir / "models").glob("*.h5"))
    assert len(kept) == 2 and atoll.best(run_dir).weights in kept
    assert all(load_params(p).keys() == {"x0", "x1"} for p in kept)
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {p for p in files if HEAP in p.read_bytes()} == set()


def test_a_commands_stderr_is_kept_whole(tmp_path: Path) -> None:
    """Its last lines, as long as an error may be (evaluation.call.ERROR_CHARS)."""
    lines = [f"{k} {'üx' * 50}" for k in range(8)]
    code = ("import sys; [sys.stderr.write(str(k) + ' ' + 'üx' * 50 + chr(10)) "
            "for k in range(8)]; sys.exit(1)")
    config = tmp_path / "atoll.toml"
    config.write_text(f'[objective]\ncommand = ["{{python}}", "-c", "{code}"]\n'
                      '[space.x]\ntype = "float"\nlow = 0.0\nhigh = 1.0\n')
    run_dir = tmp_path / "run"
    done = mpirun_atoll(1, "search", "--config", str(config), "--run-dir", str(run_dir),
                        "--set", "search.evaluations=2", "-q", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    expected = ("CommandFailed: the command exited with code 1; its stderr ended with: "
                + " | ".join(lines))
    assert 900 < len(expected) <= ERROR_CHARS
    for source in (run_dir, run_dir / "results.h5"):
        errors = open_run(source).individuals["error"]
        assert errors.tolist() == [expected, expected]
    assert all(HEAP not in p.read_bytes() for p in run_dir.glob("**/*.h5"))


def test_a_worker_file_keeps_any_error_text_whole_and_only_choices(tmp_path: Path) -> None:
    space = Space.from_dict({"act": {"type": "categorical", "choices": ["a", "ü-longer"]}})
    text = "".join(f"line {k}: {'ü' * 1000}\n" for k in range(100))
    path = tmp_path / "w.h5"
    with WorkerLog(path, space, job=0, worker=0, flush_interval=60) as log:
        log.add_individual(Individual(id=0, params={"act": "ü-longer"}, status=Status.FAILED,
                                      error=text))
        log.add_individual(Individual(id=1, params={"act": "a"}))
        log.flush()
        log.add_individual(Individual(id=2, params={"act": "a"}, status=Status.FAILED,
                                      error="ValueError: \udcff"))  # a lone surrogate
        with pytest.raises(RecordError, match=r"^individual 3: parameter 'act' is 'b', not one "
                                              r"of its choices \['a', 'ü-longer'\]$"):
            log.add_individual(Individual(id=3, params={"act": "b"}))
    with h5py.File(path, "r") as f:
        rows = committed(f["individuals"])
        assert f["individuals"].dtype["act"].itemsize == len("ü-longer".encode())
    assert rows["error"].tolist() == [text, "", "ValueError: \\udcff"]
    assert rows["act"].tolist() == ["ü-longer".encode(), b"a", b"a"]
    assert HEAP not in path.read_bytes()


def to_version_1(path: Path) -> None:
    """Rewrite a closed worker file as Atoll wrote them before schema version 2: its error
    texts and categorical values as variable-length strings, the checksum over the rest."""
    temp = path.with_suffix(".old")
    with h5py.File(path, "r") as f, h5py.File(temp, "w", libver=SWMR_LIBVER) as old:
        for name, value in f.attrs.items():
            old.attrs[name] = value
        old.attrs["schema_version"] = 1
        for name in ("epochs", "migrations", "population"):
            f.copy(f[name], old, name)
        rows = committed(f["individuals"])
        dtype = [(n, h5py.string_dtype() if rows.dtype[n].kind in "OS" else rows.dtype[n])
                 for n in rows.dtype.names]
        data = np.empty(len(rows), dtype=dtype)
        for name in rows.dtype.names:
            column = rows[name]
            data[name] = [v.decode() for v in column] if column.dtype.kind == "S" else column
        ds = old.create_dataset("individuals", data=data, maxshape=(None,), chunks=(512,))
        for name, value in f["individuals"].attrs.items():
            ds.attrs[name] = value
        ds.attrs["doc:error"] = "error text with traceback for failed evaluations, else empty"
        del ds.attrs["unit:error"]
        ds.attrs["checksum"] = checksum_value(len(data), checksum(data))
    os.replace(temp, path)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal tables (NaN equal to NaN)."""
    return a.dtype.names == b.dtype.names and len(a) == len(b) and all(
        np.array_equal(a[n], b[n], equal_nan=a.dtype[n].kind == "f") for n in a.dtype.names)


def test_a_run_with_version_1_worker_files_is_read_and_resumed(tmp_path: Path,
                                                                 finished_run: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    written = open_run(run_dir).individuals
    old_files = sorted(run_dir.glob("workers/*.h5"))
    for path in old_files:
        to_version_1(path)
        assert HEAP in path.read_bytes()  # the old layout, for real
    with h5py.File(run_dir / "run.h5", "r+") as f:
        f.attrs["schema_version"] = 1
    assert same(open_run(run_dir).individuals, written)
    done = run(atoll_cmd("inspect", str(run_dir)), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]

    done = run(atoll_cmd("resume", str(run_dir), "--set", "search.evaluations=40"), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    new_files = sorted(set(run_dir.glob("workers/*.h5")) - set(old_files))
    assert new_files and all(HEAP not in p.read_bytes() for p in new_files)
    assert HEAP not in (run_dir / "results.h5").read_bytes()
    ind = open_run(run_dir).individuals
    assert len(ind) > len(written)
    assert same(ind[np.isin(ind["id"], written["id"])], written)
    failed = ind["error"][ind["status"] == int(Status.FAILED)]
    assert len(failed) > np.count_nonzero(written["status"] == int(Status.FAILED))


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from atoll.individual import Individual, Status
    from atoll.record import WorkerLog
    from atoll.space import Space
    space = Space.from_dict({"act": {"type": "categorical", "choices": ["a", "b"]}})
    log = WorkerLog(Path(sys.argv[1]), space, job=0, worker=0, flush_interval=3600)
    for batch, _ in enumerate(sys.stdin):  # a batch of rows for each line read
        for k in range(600 * batch, 600 * batch + 600):
            log.add_individual(Individual(id=k, params={"act": "b"}, status=Status.FAILED,
                                          error=f"E{k}"))
        log.flush()
        print(600 * batch + 600, flush=True)
""")


def test_a_reader_of_a_live_file_sees_rows_written_after_it_opened_it(tmp_path: Path) -> None:
    """A file read in SWMR mode keeps the table sizes it found at opening; the rows attribute
    is read later, and was larger than the table (the file called damaged) when a flush came
    between the two."""
    path = tmp_path / "w.h5"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], env=mpi_env(),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert writer.stdin is not None and writer.stdout is not None

    def flushed() -> int:
        writer.stdin.write("\n")
        writer.stdin.flush()
        return int(writer.stdout.readline())

    try:
        assert flushed() == 600
        with open_h5(path, hint="", kind=WORKER_KIND) as f:
            ds, stream = f["individuals"], f["error_text"]
            assert f.swmr_mode and ds.shape == (600,) and stream.shape[0] < 5000
            assert flushed() == 1200
            rows = committed(ds)
        assert rows["error"].tolist() == [f"E{k}" for k in range(1200)]
        assert set(rows["act"].tolist()) == {b"b"}
    finally:
        writer.kill()
        writer.wait()
