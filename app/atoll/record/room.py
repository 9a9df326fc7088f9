"""Room on disk for a run's record: the one estimate of its size, and the probe a job writes
before it adds anything (a full or read-only disk is found before ``run.h5`` gets a job row)."""

from __future__ import annotations

import os
import shutil

from atoll.errors import RecordError
from atoll.record._h5 import write_error
from atoll.record.checkpoints import MB, checkpoint_bytes
from atoll.record.paths import RunPaths
from atoll.record.schema import read_individual_dtype, worker_individual_dtype
from atoll.space import Space

WORKER_FILE_START = 256 * 1024
"""Bytes of a worker file with its tables and their first chunks, before rows beyond them."""
FIRST_CHUNK_ROWS = 512
ROW_OVERHEAD = 1.4
"""Worker-file bytes per recorded individual over the row's size (HDF5's chunk and heap cost)."""
RUN_FILE = 16 * 1024
RESULTS_START = 32 * 1024


def record_bytes(space: Space, individuals: int, workers: int) -> int:
    """About what the record of ``individuals`` takes on ``workers``: worker files, run.h5,
    and results.h5 twice (it is rewritten beside itself). Epoch rows, error texts and model
    weights are not counted."""
    row = worker_row_bytes(space)
    worker_files = workers * (WORKER_FILE_START + FIRST_CHUNK_ROWS * row)
    worker_files += int(individuals * row * ROW_OVERHEAD)
    results = RESULTS_START + individuals * read_individual_dtype(space).itemsize
    return int(RUN_FILE + worker_files + 2 * results)


def worker_row_bytes(space: Space) -> int:
    """A worker file's individual row: text parameters are as wide as their longest choice."""
    return worker_individual_dtype(space).itemsize


def check_room(paths: RunPaths, workers: int, per_worker: int = WORKER_FILE_START) -> None:
    """Before a job adds anything, prove its worker files fit: write and remove a probe; and
    that each worker can write a checkpoint as large as the largest kept beside the one it
    replaces.

    Otherwise a full or read-only disk would be found only after ``run.h5`` got a new job row.
    """
    probe = paths.workers_dir / ".room-probe.tmp"
    try:
        with open(probe, "wb") as f:
            f.truncate(0)
            chunk = b"\0" * per_worker
            for _ in range(workers):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise write_error(paths.workers_dir, exc) from None
    finally:
        if probe.exists():
            probe.unlink()
    _, largest = checkpoint_bytes(paths)
    free = shutil.disk_usage(paths.run_dir).free
    if workers * largest > free:
        raise RecordError(
            f"{paths.checkpoints_dir}: {free / MB:.0f} MB free, but each of the {workers} "
            f"workers may write a checkpoint of up to {largest / MB:.0f} MB beside the one it "
            "replaces; free some space, or delete the checkpoints of individuals you do not "
            "need continued")

