"""A worker's scheduler wired into a job: the one object the runner builds for pruning.

It restores the scheduler from the record on resume (the completed curves its island recorded),
hears the curves the island's other workers complete in this job (read from their worker files,
at most as often as they flush), and gives every rank of the worker the leader's verdict on
each reported epoch, so that all ranks stop at the same epoch boundary.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from atoll import record
from atoll.collective import on_all
from atoll.errors import RecordError
from atoll.individual import Individual, Status
from atoll.scheduling.base import Scheduler, Verdict
from atoll.scheduling.halving import SuccessiveHalving
from atoll.scheduling.median import MedianRule

if TYPE_CHECKING:
    from mpi4py import MPI

    from atoll.config import PruningConfig
    from atoll.engine.topology import Topology
    from atoll.job.plan import JobPlan

log = logging.getLogger(__name__)


def make_scheduler(settings: PruningConfig) -> Scheduler:
    """The scheduler ``pruning.rule`` names (an active rule)."""
    return SuccessiveHalving(settings) if settings.rule == "halving" else MedianRule(settings)


class WorkerScheduling:
    """The leader's scheduler (None on followers) and the worker's agreement on verdicts."""

    def __init__(self, scheduler: Scheduler | None, metric: str, comm: MPI.Comm,
                 hear_island: Callable[[], None] = lambda: None) -> None:
        self.scheduler = scheduler
        self.metric = metric
        self.comm = comm
        self.hear_island = hear_island

    @classmethod
    def for_job(cls, plan: JobPlan, paths: record.RunPaths, topo: Topology) -> WorkerScheduling:
        """Collective over ``topo.world``: the leaders read the record before this job's files
        exist."""
        settings = plan.config.pruning
        scheduler = on_all(topo.world, lambda: _restored(plan, paths, topo)
                           if topo.is_leader else None)
        hear = _island_curves(scheduler, paths, plan.job, topo, settings.metric,
                              every=max(plan.config.record.flush_interval, 1.0)) \
            if scheduler is not None else (lambda: None)
        return cls(scheduler, settings.metric, topo.worker_comm, hear)

    def judge(self, individual: int, epoch: int, metrics: Mapping[str, float]) -> bool:
        """Whether to stop now. Collective over the worker: the leader's scheduler decides and
        tells the others."""
        verdict = self.scheduler is not None and self.scheduler.on_report(
            individual, epoch, metrics.get(self.metric, math.nan)) == Verdict.STOP
        return bool(self.comm.bcast(verdict, root=0)) if self.comm.Get_size() > 1 else verdict

    def finished(self, ind: Individual) -> None:
        """Leader, after each evaluation: the scheduler hears how it ended, then what the
        island completed meanwhile."""
        if self.scheduler is not None:
            self.scheduler.on_complete(ind.id, completed=ind.status == Status.OK)
            self.hear_island()


def _restored(plan: JobPlan, paths: record.RunPaths, topo: Topology) -> Scheduler:
    """The scheduler; on resume it has learned the completed curves its island recorded."""
    settings = plan.config.pruning
    scheduler = make_scheduler(settings)
    if not plan.resumed:
        return scheduler
    run = record.open_run(paths.run_dir)
    ind, epochs = run.individuals, run.epochs
    island = topo.layout.island_of_worker(topo.worker)
    done = ind["id"][(ind["status"] == int(Status.OK))
                     & (ind["island"] % topo.layout.islands == island)]
    if settings.metric not in (epochs.dtype.names or ()):
        return scheduler
    rows = epochs[np.isin(epochs["individual"], done)]
    for ident in np.unique(rows["individual"]):
        mine = rows[rows["individual"] == ident]
        scheduler.learn(zip(mine["epoch"].tolist(), mine[settings.metric].tolist(), strict=True))
    return scheduler


def _island_curves(scheduler: Scheduler, paths: record.RunPaths, job: int, topo: Topology,
                   metric: str, every: float) -> Callable[[], None]:
    """Reads the curves the island's other workers complete in this job from their worker
    files, at most every ``every`` seconds (they flush no more often)."""
    layout = topo.layout
    island = layout.island_of_worker(topo.worker)
    files = [paths.worker_file(job, w) for w in range(layout.workers)
             if w != topo.worker and layout.island_of_worker(w) == island]
    known: set[int] = set()
    next_read = time.monotonic() + every

    def hear() -> None:
        nonlocal next_read
        now = time.monotonic()
        if not files or now < next_read:
            return
        next_read = now + every
        for path in files:
            if not path.exists():
                continue
            try:
                curves = record.read_curves(path, metric, known)
            except (RecordError, OSError) as exc:  # mid-rebuild for a new column: next time
                log.debug("pruning: %s not read this time (%s)", path, exc)
                continue
            for ident, curve in curves:
                known.add(ident)
                scheduler.learn(curve)

    return hear
