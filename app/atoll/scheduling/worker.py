"""A worker's scheduler wired into a job: the one object the runner builds for pruning.

It restores the scheduler from the record on resume (the curves its island recorded), shares
this worker's curves with the island's other workers and hears theirs, and gives every rank of
the worker the leader's verdict on each reported epoch, so that all ranks stop (or pause) at the
same epoch boundary. Curves travel through the island loop's mailbox: no worker reads another's
files. The median rule's references are completed curves, sent with their results. The rungs of
successive halving are sent as they are reported: before judging a value at a rung, the leader
takes in what its partners reported meanwhile, so that a rung fills as fast as the island
reaches it, as in ASHA, where every worker sees every rung value at once.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from atoll import record
from atoll.collective import on_all
from atoll.individual import Individual, Status
from atoll.scheduling.asha import Asha
from atoll.scheduling.base import Scheduler, Verdict
from atoll.scheduling.halving import SuccessiveHalving
from atoll.scheduling.median import MedianRule

if TYPE_CHECKING:
    from mpi4py import MPI

    from atoll.config import PruningConfig
    from atoll.engine.island import Partners
    from atoll.engine.topology import Topology
    from atoll.job.plan import JobPlan


def make_scheduler(settings: PruningConfig) -> Scheduler:
    """The scheduler ``pruning.rule`` names (an active rule)."""
    if settings.rule == "asha":
        return Asha(settings)
    return SuccessiveHalving(settings) if settings.rule == "halving" else MedianRule(settings)


AT_RUNGS = (Status.OK, Status.PAUSED, Status.PRUNED, Status.FAILED)
"""The evaluations whose rung values count for successive halving, whatever became of them
(restored from the record on resume). An interrupted one counts too when it goes on from a
checkpoint (it reports only the epochs after it); without one it starts again, and reports
its rung values again."""


class WorkerScheduling:
    """The leader's scheduler (None on followers) and the worker's agreement on verdicts."""

    def __init__(self, scheduler: Scheduler | None, metric: str, comm: MPI.Comm) -> None:
        self.scheduler = scheduler
        self.metric = metric
        self.comm = comm
        self._curves: dict[int, list[tuple[int, float]]] = defaultdict(list)
        self._partners: Partners | None = None
        self._halving = scheduler if isinstance(scheduler, SuccessiveHalving) else None

    @classmethod
    def for_job(cls, plan: JobPlan, paths: record.RunPaths, topo: Topology) -> WorkerScheduling:
        """Collective over ``topo.world``: the leaders read the record before this job's files
        exist."""
        scheduler = on_all(topo.world, lambda: _restored(plan, paths, topo)
                           if topo.is_leader else None)
        return cls(scheduler, plan.config.pruning.metric, topo.worker_comm)

    @property
    def rungs(self) -> Asha | None:
        """The leader's rungs when evaluations pause for promotion (``asha``), else None."""
        return self.scheduler if isinstance(self.scheduler, Asha) else None

    def attach(self, partners: Partners) -> None:
        """The leader's island loop, to reach the island's other workers mid-evaluation."""
        self._partners = partners

    def judge(self, individual: int, epoch: int, metrics: Mapping[str, float]) -> Verdict:
        """Whether to go on, stop or pause now. Collective over the worker: the leader's
        scheduler decides and tells the others, so every rank acts at this epoch."""
        verdict = Verdict.CONTINUE
        if self.scheduler is not None:
            value = metrics.get(self.metric, math.nan)
            partners = self._partners_at_rung(epoch, value)
            if partners is not None:
                partners.take_in()
            if value == value and self._halving is None:  # halving sends its rungs now
                self._curves[individual].append((epoch, value))
            verdict = self.scheduler.on_report(individual, epoch, value)
            if partners is not None:
                partners.send_now(individual, [(epoch, value)])
        if self.comm.Get_size() > 1:
            verdict = Verdict(self.comm.bcast(int(verdict), root=0))
        return verdict

    def _partners_at_rung(self, epoch: int, value: float) -> Partners | None:
        """The island's other workers if ``value`` is a successive-halving rung value."""
        if self._halving is None or value != value or not self._halving.is_rung(epoch):
            return None
        return self._partners

    def finished(self, ind: Individual) -> None:
        """Leader, after each evaluation: the scheduler hears how it ended."""
        if self.scheduler is not None:
            self.scheduler.on_complete(ind.id, completed=ind.status == Status.OK)

    def shared(self, ind: Individual) -> list[tuple[int, float]]:
        """The curve of this worker's evaluation for the island's other workers, sent with its
        result: a completed one for the median rule; empty otherwise, and always under
        successive halving, whose rung values went out as they were reported (it keeps none)."""
        curve = self._curves.pop(ind.id, [])
        return curve if ind.status == Status.OK else []

    def hear(self, ind_id: int, curve: Sequence[tuple[int, float]]) -> None:
        """Part of a curve from another worker of the island."""
        rungs = self.rungs
        if rungs is not None:
            rungs.learn_of(ind_id, curve)
        elif self.scheduler is not None:
            self.scheduler.learn(curve)


def _restored(plan: JobPlan, paths: record.RunPaths, topo: Topology) -> Scheduler:
    """The scheduler; on resume it has learned the curves its island recorded (completed ones
    for the median rule; every evaluation's rung values for successive halving)."""
    settings = plan.config.pruning
    scheduler = make_scheduler(settings)
    if not plan.resumed:
        return scheduler
    run = record.open_run(paths.run_dir)
    ind, epochs = run.individuals, run.epochs
    rungs = isinstance(scheduler, SuccessiveHalving)
    statuses = [int(s) for s in (AT_RUNGS if rungs else (Status.OK,))]
    here = ind[ind["island"] % topo.layout.islands == topo.island]
    done = here["id"][np.isin(here["status"], statuses)]
    if rungs:
        cut = here["id"][here["status"] == int(Status.INTERRUPTED)].tolist()
        going_on = [i for i in cut if paths.checkpoint_file(i).exists()]
        done = np.union1d(done, np.array(going_on, dtype=done.dtype))
    if settings.metric not in (epochs.dtype.names or ()):
        return scheduler
    rows = epochs[np.isin(epochs["individual"], done)]
    for ident in np.unique(rows["individual"]).tolist():
        mine = rows[rows["individual"] == ident]
        curve = zip(mine["epoch"].tolist(), mine[settings.metric].tolist(), strict=True)
        if isinstance(scheduler, Asha):
            scheduler.learn_of(ident, curve)
        else:
            scheduler.learn(curve)
    return scheduler
