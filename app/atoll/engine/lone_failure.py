"""A search that fails on some ranks only ends the whole job at once, never in a hang.

A search's ranks meet in collectives at its end (the leaders' drain, the stop notices, the
summary). A rank whose search raised (a record it cannot write, a bug) cannot take part, and its
partners would wait for it until the time limit (srun runs the ranks with
``--kill-on-bad-exit=0``, so that a rank stopping with 75 does not kill the others). So the rank
says what failed, naming itself, and ends every rank with ``MPI_Abort``. The record is kill-safe:
flushed rows stay, the rows not yet flushed are lost, and the line says so.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from atoll.exit_codes import EXIT_FAILED

if TYPE_CHECKING:
    from mpi4py import MPI

log = logging.getLogger(__name__)


def end_every_rank(comm: MPI.Comm, error: BaseException, run_dir: Path) -> NoReturn:
    """Say that this rank's search failed with ``error`` and abort the job on every rank.

    Not collective: the one call a failing rank makes alone. The console shows one line (the
    rank's log file keeps the traceback)."""
    log.error("rank %d ends the job: its search failed, and the other ranks cannot finish "
              "without it; rows not yet written to the record are lost; fix the cause, then "
              "'atoll resume %s'", comm.Get_rank(), run_dir, exc_info=error)
    for handler in logging.getLogger().handlers:
        handler.flush()
    comm.Abort(EXIT_FAILED)  # not 75: a job script neither resubmits nor requeues it
