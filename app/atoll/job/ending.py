"""How a job ends: its exit code said in one line, its end and results.h5 written by rank 0,
and a job whose claim another job took over stopped before it writes beside that one."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from atoll import record
from atoll.config import Config
from atoll.engine.giving_up import GAVE_UP, commonest_error
from atoll.engine.stopping import WALL_TIME
from atoll.errors import RecordError, suggested
from atoll.exit_codes import EXIT_DISK_FULL, EXIT_GAVE_UP, EXIT_STOPPED
from atoll.individual import Status
from atoll.job.plan import JobPlan
from atoll.record import full
from atoll.record.claim import STALE_AFTER, Claim
from atoll.record.models import prune_to_top

if TYPE_CHECKING:
    from mpi4py import MPI

log = logging.getLogger(__name__)


def exit_code_said(paths: record.RunPaths, job: JobPlan, completed: int, disk_full: str,
                   stopped: str, start: float, comm: MPI.Comm) -> int:
    """The job's exit code, said in one line: why it stopped and what continues it."""
    done = job.done + completed
    resume = suggested("atoll", "resume", paths.run_dir)
    if disk_full:
        log.warning("job stopped: %s; the rows written before are kept: free some space, "
                    "then resume with %s (exit code %d)", disk_full, resume, EXIT_DISK_FULL)
        return EXIT_DISK_FULL
    if stopped == GAVE_UP:
        if comm.Get_rank() == 0:
            rows = record.read_completed(paths.run_dir)
            mine = rows[(rows["started"] >= start) & (rows["status"] == int(Status.FAILED))]
            error, times, failed = commonest_error(str(e) for e in mine["error"])
            log.error("job stopped: %d evaluations failed and none of the run's succeeded; the "
                      "commonest error (%d of %d): %s. Fix the objective, then %s continues "
                      "this run (search.give_up_after = 0 never gives up; exit code %d)",
                      failed, times, failed, error, resume, EXIT_GAVE_UP)
        return EXIT_GAVE_UP
    exit_code = 0 if done >= job.budget else EXIT_STOPPED
    if stopped or exit_code:
        log.warning("job stopped early (%s): %d of %d evaluations done; exit code %d, resume "
                    "with %s", stopped or WALL_TIME, done, job.budget, exit_code, resume)
    return exit_code


def refuse_if_taken_over(comm: MPI.Comm, paths: record.RunPaths,
                         held: Sequence[Claim]) -> None:
    """End a job whose claim another job took over (collective): its rows are in its own
    worker files, but its end would write run.h5 and results.h5 beside the other job."""
    holder = comm.bcast(next((c.lost_to for c in held if c.lost_to), ""), root=0)
    if holder:
        raise RecordError(
            f"{paths.run_dir}: another job ({holder}) took over this run directory while this "
            f"job ran (its claim looked gone: unrefreshed for {STALE_AFTER:g} s, or deleted); "
            "this job stopped, its evaluations are kept, and the run goes on in the other job")


def finish_job(paths: record.RunPaths, job: int, exit_code: int, config: Config,
               disk_full: str) -> tuple[Path | None, int, str]:
    """Rank 0 closes the job: its end in run.h5, results.h5, and the run's top weights.
    Returns results.h5 (None if not written), the job's exit code and where the disk was full.

    run.h5 records the job's end after results.h5 is written: a job killed or failing while
    consolidating stays recorded as running, and a full disk there makes its code
    EXIT_DISK_FULL (never success). A full disk in run.h5 itself leaves the job recorded as
    running, as after a kill.
    """
    results: Path | None = None
    stop = time.time()
    try:
        with record.writing_results(paths):
            try:
                results = record.consolidate(paths, ending=(job, stop, exit_code))
            except full.DiskFull as exc:
                exit_code = EXIT_DISK_FULL
                log.warning("results.h5 not written: %s; free some space, then %s writes it "
                            "(exit code %d)", exc, suggested("atoll", "resume", paths.run_dir),
                            exit_code)
                disk_full = disk_full or str(exc)
            record.end_job(paths, job, stop=stop, exit_code=exit_code)
    except full.DiskFull as exc:
        return None, EXIT_DISK_FULL, disk_full or str(exc)
    if paths.model_files():
        prune_to_top(paths, record.read_completed(paths.run_dir), config.record.top_models)
    return results, exit_code, disk_full


def results_now(paths: record.RunPaths) -> Path:
    """results.h5 of a run whose budget is spent, written again if it is missing, damaged or
    older than a worker file (the last job met a full disk writing it)."""
    target = paths.results_file
    damage = record.results_problem(paths, "writing it again from the worker files") \
        if paths.worker_files() else ""
    if damage:
        log.warning("%s", damage)
    if damage or not target.exists() or any(w.stat().st_mtime_ns > target.stat().st_mtime_ns
                                            for w in paths.worker_files()):
        with record.writing_results(paths):
            record.consolidate(paths)
    return target
