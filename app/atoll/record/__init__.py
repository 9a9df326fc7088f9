"""The record: each worker leader's HDF5 log, the run file, the reader and ``results.h5``.

Layout of a run directory (built only by :class:`RunPaths`)::

    RUN_DIR/run.h5                          config, search space, jobs (world rank 0 writes it)
    RUN_DIR/workers/job000-worker00000.h5   individuals, epochs, migrations of one worker leader
    RUN_DIR/results.h5                      the whole run in single tables, written at the end
    RUN_DIR/checkpoints/ind000000000042.h5  an individual's last training state (checkpoints.py)

Only h5py, numpy and the standard library are used here: never torch, never mpi4py.
"""

from atoll.record._h5 import plain, written_whole
from atoll.record.consolidate import consolidate, writing_results
from atoll.record.paths import RunPaths
from atoll.record.provenance import slurm_ids, software_versions
from atoll.record.reader import (
    RunData,
    open_run,
    read_completed,
    read_history,
    results_problem,
)
from atoll.record.room import check_room
from atoll.record.run import (
    RunInfo,
    begin_job,
    check_new_run_dir,
    check_run,
    create_run,
    end_job,
    set_budget,
)
from atoll.record.schema import SCHEMA_VERSION, check_param_names, check_record_fits
from atoll.record.writer import WorkerLog

__all__ = [
    "SCHEMA_VERSION",
    "RunData",
    "RunInfo",
    "RunPaths",
    "WorkerLog",
    "begin_job",
    "check_new_run_dir",
    "check_param_names",
    "check_record_fits",
    "check_room",
    "check_run",
    "consolidate",
    "writing_results",
    "create_run",
    "end_job",
    "open_run",
    "plain",
    "read_completed",
    "read_history",
    "results_problem",
    "set_budget",
    "slurm_ids",
    "software_versions",
    "written_whole",
]
