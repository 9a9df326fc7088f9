"""Logging set up once per process: rank 0 speaks, the others only warn.

Modules log through ``logging.getLogger(__name__)`` and never check ranks themselves. The job
layer (``atoll.job``) runs the same code on every rank and decides the same everywhere, so its
messages are said by rank 0 alone: a job-level warning shows once, not once per rank.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")


def launcher_rank() -> int:
    """This process's world rank as the launcher set it, read without starting MPI."""
    for name in _RANK_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


JOB_LOGGER = "atoll.job"

FILE_ONLY = {"atoll_file_only": True}
"""``extra`` of a line for the rank's log file alone: housekeeping said once per event (a
checkpoint deleted), which on the console would bury what a person must read."""


def setup_logging(rank: int, verbose: bool = False) -> None:
    """The console: rank 0 at INFO, other ranks' warnings; ``verbose`` (``--debug``): DEBUG
    with full tracebacks, else a traceback is shortened to its last line (the rank's log file
    keeps it whole: :func:`rank_log`)."""
    level = logging.DEBUG if verbose else logging.INFO if rank == 0 else logging.WARNING
    logging.basicConfig(level=level, force=True)
    fmt = f"%(asctime)s [rank {rank}] %(levelname)s %(name)s: %(message)s"
    formatter = logging.Formatter(fmt, "%H:%M:%S") if verbose else _OneLine(fmt, "%H:%M:%S")
    for handler in logging.getLogger().handlers:
        handler.setFormatter(formatter)
        if rank != 0:
            handler.addFilter(_not_the_jobs)
        if not verbose:
            handler.addFilter(_not_file_only)


class _OneLine(logging.Formatter):
    """One console line per message: 200 failed individuals must not print 200 tracebacks."""

    def format(self, record: logging.LogRecord) -> str:
        if not record.exc_info or record.exc_info[1] is None:
            return super().format(record)
        saved = record.exc_info, record.exc_text
        record.exc_info = record.exc_text = None
        try:
            line = super().format(record)
        finally:
            record.exc_info, record.exc_text = saved
        error = saved[0][1]
        text = (str(error).splitlines() or [""])[0]
        return f"{line}: {type(error).__name__}: {text} (traceback in the rank's log file)"


def _not_the_jobs(record: logging.LogRecord) -> bool:
    return not record.name.startswith(JOB_LOGGER)


def _not_file_only(record: logging.LogRecord) -> bool:
    return not getattr(record, "atoll_file_only", False)


@contextlib.contextmanager
def job_messages_on_rank_0(rank: int) -> Iterator[None]:
    """For the Python API, where the user's script set up logging, or nothing did: while the
    block runs, the console handlers (and Python's last-resort one) show job-level messages
    on rank 0 only and no file-only lines, as the command line's do; the rank log files keep
    them."""
    filters = [_not_file_only] if rank == 0 else [_not_file_only, _not_the_jobs]
    consoles = [*logging.getLogger().handlers, *([logging.lastResort] if logging.lastResort
                                                 else [])]
    for handler in consoles:
        for kept_out in filters:
            handler.addFilter(kept_out)
    try:
        yield
    finally:
        for handler in consoles:
            for kept_out in filters:
                handler.removeFilter(kept_out)


RANK_FORMAT = "%(asctime)s rank {rank} host {host} worker {worker} %(levelname)s %(name)s: " \
    "%(message)s"


class _RankFile(logging.FileHandler):
    """A rank's log file that drops its lines while the disk is full: the console still shows
    what matters, and the job reports the full disk once instead of a traceback per line."""

    def handleError(self, record: logging.LogRecord) -> None:
        failed = sys.exc_info()[1]
        if isinstance(failed, OSError) and failed.errno in (errno.ENOSPC, errno.EDQUOT):
            return
        super().handleError(record)


@contextlib.contextmanager
def rank_log(path: Path, *, rank: int, host: str, worker: int) -> Iterator[None]:
    """Everything this rank logs at INFO and above (tracebacks of failed individuals too) also
    goes to ``path`` while the block runs, each line naming the rank, host and worker; the
    console keeps its rank filtering."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = _RankFile(path, encoding="utf-8")
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter(RANK_FORMAT.format(rank=rank, host=host,
                                                              worker=worker)))
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(min(previous, logging.INFO) if previous else logging.INFO)
    for console in root.handlers:
        if console is not handler and console.level == logging.NOTSET:
            console.setLevel(previous or logging.WARNING)  # the console sees what it did
    try:
        yield
    finally:
        root.removeHandler(handler)
        with contextlib.suppress(OSError):  # a full disk: the last lines are lost, not the job
            handler.close()
        root.setLevel(previous)
