"""A worker's evaluator: one context per individual, the objective's outcome, and the
agreement of a multi-rank worker's ranks on it.

Every rank of a worker evaluates each individual with its own :class:`WorkerEvaluator`; the
leader's loss counts, but if any rank failed, the individual failed on all of them. The ranks
of a multi-rank worker first meet at the end of the evaluation (:mod:`atoll.evaluation.meeting`),
which settles any collective ``ctx`` call some of them still made.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from atoll.errors import ranks_text
from atoll.evaluation.call import ERROR_CHARS, Objective, cut, evaluate
from atoll.evaluation.context import EpochSink, WeightSink, WorkerServices
from atoll.evaluation.metric_check import MetricCheck
from atoll.evaluation.process_group import ProcessGroupOwner
from atoll.individual import NO_EPOCH, NO_PARENT, Individual, Status, about_of

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from mpi4py import MPI

    from atoll.config import Config
    from atoll.engine.topology import NodePlace
    from atoll.record.checkpoints import CheckpointStore
    from atoll.scheduling.base import Verdict

log = logging.getLogger(__name__)

INTERRUPTED = "stopped early: the job was asked to stop"


SHAPE_HINT = ("; if a parameter changes the model's shapes, list it in inherit.shape_params: "
              "a child then inherits only from a parent with its value")
"""Said when a child declines what it inherits (a command's script cannot tell Atoll so)."""


class WorkerEvaluator:
    """Evaluates individuals in place (loss, status, error, started, finished) on one rank."""

    def __init__(self, objective: Objective, services: WorkerServices,
                 eval_timeout: float = 0.0, maximize: bool = False) -> None:
        self.objective = objective
        self.services = services
        self.eval_timeout = eval_timeout
        self.maximize = maximize  # the loss is then the negated value: the engine only minimizes
        self._said_no_checkpoint = False
        self._said_lost_weights = False

    @classmethod
    def for_job(cls, config: Config, objective: Objective, comm: MPI.Comm, *, node: NodePlace,
                record_epoch: EpochSink | None = None, offer_weights: WeightSink | None = None,
                should_stop: Callable[[], bool] | None = None,
                judge_epoch: Callable[[int, int, Mapping[str, float]], Verdict] | None = None,
                checkpoints: CheckpointStore | None = None,
                before_checkpoint: Callable[[], None] | None = None,
                answer_partners: Callable[[], object] | None = None) -> WorkerEvaluator:
        """The evaluator of a job's worker, with its settings taken from ``config``."""
        services = WorkerServices(
            comm=comm, seed=config.seed, node=node,
            group=ProcessGroupOwner(comm, config.distributed.backend,
                                    config.distributed.timeout, node),
            data_dir=Path(config.objective.data_dir) if config.objective.data_dir else None,
            options=config.objective.options, record_epoch=record_epoch,
            offer_weights=offer_weights, should_stop=should_stop, judge_epoch=judge_epoch,
            checkpoints=checkpoints, before_checkpoint=before_checkpoint,
            answer_partners=answer_partners,
            shape_hint=SHAPE_HINT if config.inherits and not config.inherit.shape_params
            and not config.objective.command else "",
            metric_check=MetricCheck(config.pruning.metric) if config.pruning.active else None)
        return cls(objective, services, config.search.eval_timeout,
                   maximize=config.objective.direction == "maximize")

    def __call__(self, ind: Individual) -> None:
        ctx = self.services.context(ind.id, ind.params, about=about_of(ind))
        ind.started = time.time()
        ind.loss, ind.status, ind.error = evaluate(self.objective, ind.params, ctx,
                                                   self.eval_timeout)
        ctx.end()
        if self.maximize and ind.status == Status.OK:
            ind.loss = -ind.loss
        if self.services.meeting is not None:
            self.services.meeting.end()
            self._agree_after_evaluation(ind, quiet=ctx.interrupted, offered=ctx.offered)
        ind.finished = time.time()
        lineage = ctx.inherited  # what its training actually started from
        ind.inherit_from = NO_PARENT if lineage is None else lineage.individual
        ind.inherit_epoch = NO_EPOCH if lineage is None else lineage.epoch
        if ctx.interrupted:
            ind.status, ind.error = Status.INTERRUPTED, INTERRUPTED
        elif ctx.pruned_at is not None and ind.status == Status.OK:
            ind.status, ind.error = Status.PRUNED, f"pruned at epoch {ctx.pruned_at}"
        elif ctx.paused_at is not None and ind.status == Status.OK:
            self._pause(ind, ctx.paused_at, ctx.saved_at, ctx.is_leader)
        if self.services.metric_check is not None and ctx.is_leader:
            self.services.metric_check.evaluation_ended(ind.id, ind.status == Status.OK)

    def _pause(self, ind: Individual, epoch: int, saved: int | None, leader: bool) -> None:
        """Paused with its checkpoint at ``epoch``; without one there, stopped (pruned), said
        once per worker: continuing it would train some epochs twice or from scratch."""
        if saved == epoch:
            ind.status, ind.error = Status.PAUSED, f"paused at epoch {epoch}"
            return
        ind.status, ind.error = Status.PRUNED, f"pruned at epoch {epoch}"
        if leader and not self._said_no_checkpoint:
            self._said_no_checkpoint = True
            log.warning("individual %d: paused at epoch %d by pruning.rule = 'asha', but the "
                        "objective saved no checkpoint at that epoch, so it is stopped (pruned) "
                        "instead, as are such ones later (said once per worker); call "
                        "ctx.save_checkpoint(state, epoch) at each epoch and continue from "
                        "ctx.load_checkpoint()", ind.id, epoch)

    def _agree_after_evaluation(self, ind: Individual, quiet: bool = False,
                                offered: bool = False) -> None:
        """The worker's ranks compare how the evaluation went, in one allgather: if any rank
        failed, the individual failed on every rank; weights offered off rank 0 are said lost.

        Every failing rank's error is recorded (a partner that waited in a collective fails by
        timeout too). The process group may be out of step then: it is rebuilt on next use.
        ``quiet``: the evaluation was interrupted by the job's stop, which is what the record
        says of it, so no failure is said. ``offered``: whether this rank called
        ``ctx.keep_weights``; weights offered on other ranks only are kept nowhere, said once.
        """
        gathered = self.services.comm.allgather(
            (ind.error if ind.status == Status.FAILED else "", offered))
        errors = [error for error, _ in gathered]
        self._say_lost_weights(ind.id, [rank for rank, (_, o) in enumerate(gathered) if o])
        ranks_of: dict[str, list[int]] = {}  # each error once, with the ranks that had it
        for rank, error in enumerate(errors):
            if error:
                ranks_of.setdefault(error, []).append(rank)
        if not ranks_of:
            return
        failed = [f"rank{'s' if len(ranks) > 1 else ''} {ranks_text(ranks)}: {error}"
                  for error, ranks in ranks_of.items()]
        if failed != [f"rank 0: {ind.error}"]:
            error = cut("; ".join(failed), 2 * ERROR_CHARS)
            ind.loss, ind.status, ind.error = float("nan"), Status.FAILED, error
            if self.services.comm.Get_rank() == 0 and not quiet:  # it warned of its own only
                log.warning("individual %d failed on its worker's ranks: %s", ind.id, error)
        self.services.group.close()

    def _say_lost_weights(self, ident: int, offering: list[int]) -> None:
        if not offering or offering[0] == 0 or self._said_lost_weights:
            return
        self._said_lost_weights = True
        if self.services.comm.Get_rank() == 0 and self.services.offer_weights is not None:
            log.warning("individual %d: ctx.keep_weights was called on worker rank(s) %s but "
                        "not on rank 0, whose call alone keeps weights: none were kept (said "
                        "once per worker); call it on rank 0 too", ident, ranks_text(offering))

    def close(self) -> None:
        """The end of the job on this rank: release the process group and its store."""
        self.services.group.close()
        if self.services.meeting is not None:
            self.services.meeting.close()
