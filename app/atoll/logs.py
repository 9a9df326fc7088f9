"""Logging set up once per process: rank 0 speaks, the others only warn.

Modules log through ``logging.getLogger(__name__)`` and never check ranks themselves. The job
layer (``atoll.job``) runs the same code on every rank and decides the same everywhere, so its
messages are said by rank 0 alone: a job-level warning shows once, not once per rank.
"""

from __future__ import annotations

import logging
import os

_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")


def launcher_rank() -> int:
    """This process's world rank as the launcher set it, read without starting MPI."""
    for name in _RANK_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


JOB_LOGGER = "atoll.job"


def setup_logging(rank: int, verbose: bool = False) -> None:
    level = logging.DEBUG if verbose else logging.INFO if rank == 0 else logging.WARNING
    logging.basicConfig(level=level, format=f"%(asctime)s [rank {rank}] %(levelname)s "
                        "%(name)s: %(message)s", datefmt="%H:%M:%S", force=True)
    if rank != 0:
        for handler in logging.getLogger().handlers:
            handler.addFilter(_not_the_jobs)


def _not_the_jobs(record: logging.LogRecord) -> bool:
    return not record.name.startswith(JOB_LOGGER)
