"""5. Recording cost (Atoll only): WorkerLog per individual and per epoch row, bytes, reading.

Runs in a process of its own (``python recording.py OUT.json``, started by :func:`run`), in
Atoll's venv, on a 4-dimensional float space (rastrigin's):

- per individual: ``add_individual`` + ``maybe_flush`` for each row (as the island loop calls
  them) and an explicit ``flush`` every FLUSH_EVERY rows, then ``close``; total / rows;
- per epoch row: the same with ``add_epoch`` (two metrics);
- bytes per row: (file size after ROWS rows - size of an empty log) / ROWS;
- reading ROWS individuals back: a run directory made by a one-evaluation search through the
  API, whose worker file is then replaced by one holding ROWS individuals written with
  WorkerLog. Timed: :func:`read_for_resume` (what a resuming leader does before its first
  evaluation) and ``read_completed`` (what rank 0 reads at every job's start to count the
  evaluations done).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ATOLL_PYTHON, Row, mpi_env

ROWS = 100_000
FLUSH_EVERY = 1_000
REPEATS = 3
TARGET_US = 12.5  # 5 % of 0.25 ms
TARGET_READ = 2.0
TARGET_COUNT = 1.0


def read_for_resume(run_dir: Path) -> Any:
    """What a resuming leader does before its first evaluation: read the earlier jobs'
    individuals and migrations, and rebuild its island (here one island holding them all)."""
    from atoll.engine.restore import restore_population
    from atoll.engine.topology import plan_layout
    from atoll.record import read_history

    individuals, migrations = read_history(run_dir, before_job=1 << 30)
    return restore_population(individuals, migrations, _space(), plan_layout(1, 1, 1), 0)


def _space() -> Any:
    from atoll.config import builtin_space

    return builtin_space("rastrigin", 4)


def _individuals(n: int, worker: int = 0) -> list[Any]:
    import numpy as np

    from atoll.individual import Individual, Origin

    rng = np.random.default_rng(0)
    values = rng.uniform(-5.12, 5.12, size=(n, 4))
    losses = rng.uniform(0, 80, size=n)
    now = time.time()
    return [Individual(id=i, params={f"x{k}": float(values[i, k]) for k in range(4)},
                       island=0, worker=worker, generation=i, owner=worker,
                       parents=(max(i - 2, -1), max(i - 1, -1)), origin=Origin.GA,
                       loss=float(losses[i]), born=now + i, started=now + i,
                       finished=now + i + 0.5)
            for i in range(n)]


def _write(path: Path, add: Any, n: int) -> float:
    """Seconds to queue ``n`` rows with ``add(log, i)`` and flush them as the loop would."""
    from atoll.record import WorkerLog

    log = WorkerLog(path, _space(), job=0, worker=0, flush_interval=5.0)
    start = time.perf_counter()
    for i in range(n):
        add(log, i)
        log.maybe_flush()
        if (i + 1) % FLUSH_EVERY == 0:
            log.flush()
    log.close()
    return time.perf_counter() - start


def _empty_size(folder: Path) -> int:
    from atoll.record import WorkerLog

    path = folder / "empty.h5"
    WorkerLog(path, _space(), job=0, worker=0, flush_interval=5.0).close()
    return path.stat().st_size


def _synthetic_run(folder: Path, individuals: list[Any]) -> Path:
    """A real run directory (one evaluation, via the API), then 100k individuals in its log."""
    from atoll_side import config_table

    from atoll.api import search
    from atoll.config import parse_config
    from atoll.record import RunPaths, WorkerLog

    run_dir = folder / "run"
    config = parse_config(config_table({
        "function": "rastrigin", "seed": 1, "sleep": 0.0, "evals_per_worker": 1, "islands": 1,
        "migration_probability": 0.1}))
    search(config, run_dir)
    paths = RunPaths(run_dir)
    (worker_file,) = paths.worker_files()
    worker_file.unlink()
    paths.results_file.unlink(missing_ok=True)  # as after an interrupted job
    with WorkerLog(worker_file, config.space, job=0, worker=0, flush_interval=5.0) as log:
        for i, ind in enumerate(individuals):
            log.add_individual(ind)
            if (i + 1) % FLUSH_EVERY == 0:
                log.flush()
    return run_dir


def measure() -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="bench-recording-"))
    individuals = _individuals(ROWS)
    empty = _empty_size(folder)
    out: dict[str, Any] = {"individual_s": [], "epoch_s": [], "read_s": [], "count_s": []}
    for rep in range(REPEATS):
        path = folder / f"ind{rep}.h5"
        out["individual_s"].append(
            _write(path, lambda log, i: log.add_individual(individuals[i]), ROWS) / ROWS)
        out["individual_bytes"] = (path.stat().st_size - empty) / ROWS
        path = folder / f"epoch{rep}.h5"
        out["epoch_s"].append(_write(path, lambda log, i: log.add_epoch(
            i // 10, i % 10, 1.7e9 + i, {"loss": 1.0 / (i + 1), "accuracy": 0.5}), ROWS) / ROWS)
        out["epoch_bytes"] = (path.stat().st_size - empty) / ROWS
    single = folder / "single.h5"
    from atoll.record import WorkerLog, read_completed

    with WorkerLog(single, _space(), job=0, worker=0, flush_interval=5.0) as log:
        times = []
        for ind in individuals[:200]:
            log.add_individual(ind)
            start = time.perf_counter()
            log.flush()
            times.append(time.perf_counter() - start)
    out["flush_one_row_s"] = sorted(times)[len(times) // 2]
    run_dir = _synthetic_run(folder, individuals)
    for _ in range(REPEATS):
        start = time.perf_counter()
        data = read_for_resume(run_dir)
        out["read_s"].append(time.perf_counter() - start)
    out["read_rows"] = len(data)
    for _ in range(REPEATS):
        start = time.perf_counter()
        table = read_completed(run_dir)
        out["count_s"].append(time.perf_counter() - start)
    out["count_rows"] = len(table)
    shutil.rmtree(folder)
    return out


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        out_file = Path(tmp) / "recording.json"
        subprocess.run([str(ATOLL_PYTHON), __file__, str(out_file)], check=True,
                       env=mpi_env())
        got = json.loads(out_file.read_text())
    for key in ("read_rows", "count_rows"):
        if got[key] != ROWS:
            raise RuntimeError(f"{key}: read back {got[key]} of {ROWS} individuals")
    ind, epoch, read, count = (min(got[k]) for k in ("individual_s", "epoch_s", "read_s",
                                                      "count_s"))
    log(f"  recording: per individual {[round(t * 1e6, 2) for t in got['individual_s']]} us, "
        f"per epoch row {[round(t * 1e6, 2) for t in got['epoch_s']]} us, "
        f"read {[round(t, 3) for t in got['read_s']]} s, "
        f"read_completed {[round(t, 3) for t in got['count_s']]} s")
    every = f"flush every {FLUSH_EVERY:,} rows, {ROWS:,} rows"
    rows = [
        Row(f"recording per individual (add_individual + maybe_flush + amortised flush; "
            f"{every}; best of {REPEATS})", f"{ind * 1e6:.2f} us", target=f"<= {TARGET_US} us",
            passed=ind * 1e6 <= TARGET_US),
        Row(f"recording per epoch row (add_epoch, 2 metrics; {every}; best of {REPEATS})",
            f"{epoch * 1e6:.2f} us"),
        Row("file bytes per individual (4 float parameters)", f"{got['individual_bytes']:.0f} B"),
        Row("file bytes per epoch row (2 metrics)", f"{got['epoch_bytes']:.0f} B"),
        Row(f"resume from {ROWS:,} recorded individuals (read_history + restore_population; "
            f"best of {REPEATS})", f"{read:.3f} s", target=f"< {TARGET_READ} s",
            passed=read < TARGET_READ),
        Row(f"count at a job's start from {ROWS:,} recorded individuals (read_completed; "
            f"best of {REPEATS})", f"{count:.3f} s", target=f"< {TARGET_COUNT} s",
            passed=count < TARGET_COUNT),
    ]
    notes = [f"one flush of a single individual row: {got['flush_one_row_s'] * 1e3:.2f} ms "
             f"(median of 200)"]
    return rows, notes


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(measure()))
