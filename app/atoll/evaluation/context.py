"""What an objective sees of Atoll: the evaluation context ``ctx``.

An objective is ``objective(params, ctx) -> loss`` and ``ctx`` (a :class:`Context`) is the only
Atoll object it touches: it never sees message tags, files or the population. Objectives type
their argument as ``atoll.Context`` and never build one: the engine builds one per individual
from the worker's :class:`WorkerServices`, the only place where the context meets the engine.
"""

from __future__ import annotations

import functools
import operator
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from atoll.engine.topology import NodePlace
from atoll.evaluation.alarm import alarm_held
from atoll.evaluation.checkpointing import CheckpointCalls, Inherited, lineage_of
from atoll.evaluation.meeting import Meeting
from atoll.evaluation.metric_check import MetricCheck
from atoll.scheduling.base import Verdict

if TYPE_CHECKING:
    import torch
    from mpi4py import MPI

    from atoll.evaluation.process_group import ProcessGroupOwner, WorkerGroup
    from atoll.record.checkpoints import Checkpoint, CheckpointStore

EpochSink = Callable[[int, int, float, Mapping[str, float]], None]
"""Receives (individual id, epoch, unix time, metrics) on the worker leader."""
WeightSink = Callable[[int, float, Mapping[str, Any], Mapping[str, Any]], Any]
"""Receives (individual id, loss, state_dict, parameters) on the worker leader."""


@dataclass(frozen=True)
class WorkerServices:
    """What every context of one worker shares: the run's settings for objectives and the
    engine's hooks (the record, the kept weights, the stop agreement, the process group)."""

    comm: MPI.Comm
    group: ProcessGroupOwner
    seed: int = 0
    data_dir: Path | None = None
    options: Mapping[str, Any] | None = None
    node: NodePlace = NodePlace()
    """Where this rank sits among the job's ranks on its node (its devices)."""
    record_epoch: EpochSink | None = None
    offer_weights: WeightSink | None = None
    should_stop: Callable[[], bool] | None = None
    judge_epoch: Callable[[int, int, Mapping[str, float]], Verdict] | None = None
    """(individual id, epoch, metrics) -> whether pruning lets it go on, stops it or pauses it;
    the same on every rank."""
    checkpoints: CheckpointStore | None = None
    """The run's checkpoints (on every rank: the leader writes, every rank reads)."""
    shape_hint: str = ""
    """Added to the warning of a child that declines the state it inherits, where no
    ``inherit.shape_params`` keeps children from parents of other shapes."""
    before_checkpoint: Callable[[], None] | None = None
    """Called on the leader before it writes a checkpoint (the record flushes the epochs it
    holds)."""
    metric_check: MetricCheck | None = None
    """Sees the metrics the leader's reports carry (when pruning is on)."""
    answer_partners: Callable[[], object] | None = None
    """Called on the leader after each report and stop check: its island loop answers what its
    partners asked meanwhile (a share of the budget), an epoch later rather than an
    evaluation."""
    meeting: Meeting | None = field(init=False, default=None)
    """Where a multi-rank worker's ranks meet before each collective call (within the process
    group's timeout, ``distributed.timeout``); None for a worker of one rank."""

    def __post_init__(self) -> None:
        if self.comm.Get_size() > 1:
            object.__setattr__(self, "meeting", Meeting(self.comm, self.group.timeout))

    def together(self, call: str) -> AbstractContextManager[None]:
        """The block runs once every rank of the worker has reached ``call`` (a clear error
        otherwise, never a hang); see :meth:`Meeting.together`."""
        return self.meeting.together(call) if self.meeting is not None else nullcontext()

    def context(self, individual_id: int, params: Mapping[str, Any] | None = None,
                about: Mapping[str, Any] | None = None) -> Context:
        """The context of one evaluation (``params``: the individual's, kept with its
        weights; ``about``: the individual as its checkpoints keep it)."""
        return Context(self, individual_id, params, about)


def whole_epoch(epoch: Any) -> int:
    """``epoch`` as an int; a fraction (``0.5``) would be cut and mix with another epoch."""
    try:
        return operator.index(epoch)
    except TypeError:
        if isinstance(epoch, float) and epoch.is_integer():
            return int(epoch)
    raise TypeError(f"ctx.report: epoch must be a whole number (0, 1, 2, ...), got {epoch!r}")


def numbers(epoch: int, metrics: Mapping[str, Any]) -> dict[str, float]:
    """The reported metrics as floats, or one line naming the one that is not a number."""
    values = {}
    for name, value in metrics.items():
        try:
            values[name] = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"ctx.report(epoch={epoch}): metric {name!r} must be a number, got "
                            f"{value!r}") from None
    return values


def without_ddp_prefix(state_dict: Mapping[str, Any]) -> Mapping[str, Any]:
    """``state_dict`` without the ``module.`` every key of a DDP-wrapped model's starts with."""
    if state_dict and all(str(key).startswith("module.") for key in state_dict):
        return {str(key)[len("module."):]: value for key, value in state_dict.items()}
    return state_dict


class Context:
    """Everything one evaluation may use.

    ``comm`` is the worker's own communicator (all ranks that evaluate this individual
    together); ``rng`` is seeded from the run seed and the individual id, so a rank's random
    stream does not depend on which worker happens to evaluate the individual.
    """

    def __init__(self, services: WorkerServices, individual_id: int,
                 params: Mapping[str, Any] | None = None,
                 about: Mapping[str, Any] | None = None) -> None:
        self._services = services
        self._params: Mapping[str, Any] = params or {}
        self._about: Mapping[str, Any] = about or {}
        self._calls: CheckpointCalls | None = None
        self.individual_id = individual_id
        self.interrupted = False
        """Set when :meth:`report` told the objective to stop because the job is stopping."""
        self.last_epoch: int | None = None
        """The epoch the objective ends at, if it says so: a job stop that its report meets
        leaves the evaluation finished (its value counts) instead of interrupted."""
        self.pruned_at: int | None = None
        """The epoch at which :meth:`report` told the objective to stop because pruning said
        its curve will not make it."""
        self.paused_at: int | None = None
        """The epoch at which :meth:`report` told the objective to stop because pruning
        paused it (``rule = "asha"``): its island may continue it from its checkpoint."""
        self.saved_at: int | None = None
        """The epoch of the last checkpoint :meth:`save_checkpoint` saved."""
        self.offered = False
        """Whether this rank called :meth:`keep_weights` (only the leader's call keeps any)."""
        self._ended = False

    def end(self) -> None:
        """The evaluation returned: a call through this ctx later (an objective that kept it)
        is refused, instead of writing into this individual's record, checkpoint or weights."""
        self._ended = True

    def _open(self, call: str) -> None:
        if self._ended:
            raise RuntimeError(f"ctx.{call}: this ctx is individual {self.individual_id}'s, "
                               "whose evaluation has ended; use the ctx each call of the "
                               "objective gets")

    @property
    def comm(self) -> MPI.Comm:
        return self._services.comm

    @property
    def seed(self) -> int:
        """The run's seed; with ``individual_id`` it seeds ``rng``."""
        return self._services.seed

    @property
    def data_dir(self) -> Path | None:
        """``objective.data_dir`` from the config (None when empty)."""
        return self._services.data_dir

    @property
    def options(self) -> Mapping[str, Any]:
        """``[objective.options]`` from the config, read-only."""
        return self._services.options or {}

    @property
    def local_rank(self) -> int:
        """This rank's index among the job's ranks on its node."""
        return self._services.node.rank

    @property
    def node(self) -> NodePlace:
        """Where this rank sits among the job's ranks on its node (``local_rank`` is its index)."""
        return self._services.node

    @functools.cached_property
    def rng(self) -> np.random.Generator:
        """This individual's random stream, the same on every rank of the worker. Made on
        first use: seeding a generator costs more than a cheap objective."""
        return np.random.default_rng([self.seed, self.individual_id])

    @property
    def rank(self) -> int:
        return self.comm.Get_rank()

    @property
    def size(self) -> int:
        return self.comm.Get_size()

    @property
    def is_leader(self) -> bool:
        """Only the leader's return value counts, and only it records epochs."""
        return self.comm.Get_rank() == 0

    @property
    def process_group(self) -> Any:
        """The worker's torch process group (NCCL with GPUs, else gloo), made once per worker.

        First use is collective: every rank of the worker must ask for it (or for ``device``).
        """
        return self._group().process_group

    @property
    def device(self) -> torch.device:
        """This rank's device: ``cuda:<node-local rank>`` under NCCL, else the CPU. First use
        is collective, as for ``process_group``."""
        return self._group().device

    def _group(self) -> WorkerGroup:
        owner = self._services.group
        if owner.current is not None:
            return owner.current
        with self._services.together("the first use of ctx.process_group or ctx.device"):
            return owner.get()

    def report(self, epoch: int, **metrics: float) -> bool:
        """Record one epoch's metrics; answers whether to stop this evaluation early.

        Collective: call it on every rank of the worker with the same epoch (a call on some
        ranks only fails the evaluation with an error naming them); the leader records its
        metrics (numbers; other ranks' are not read). Metrics of one epoch may come in several
        calls (``train_loss``, then ``val_loss``): the record keeps each one's last value. The
        answer is the same on every rank: ``True`` once the job is asked to stop (a signal or the
        wall time: the individual is then recorded as interrupted whatever it returns, unless
        ``epoch`` is the ``last_epoch`` the objective set, or pruning judges this very epoch),
        or once ``[pruning]`` judges its curve hopeless (it is then recorded as pruned, with the
        value it returns) or pauses it (``rule = "asha"``: recorded as paused if the objective
        saves a checkpoint at this epoch, before or after this call, before it returns).
        """
        self._open("report")
        services = self._services
        epoch = whole_epoch(epoch)
        # Only the leader's metrics are read: others may pass anything (None, say).
        values = numbers(epoch, metrics) if self.is_leader else {}
        with services.together(f"ctx.report(epoch={epoch})"):
            stopping = services.should_stop is not None and services.should_stop()
            # judged even when a stop comes with it: a continued evaluation starts after this
            # epoch, so a rung here would never be judged again
            if not self.interrupted and not self.judged and services.judge_epoch is not None:
                verdict = services.judge_epoch(self.individual_id, epoch, values)
                if verdict == Verdict.STOP:
                    self.pruned_at = epoch
                elif verdict == Verdict.PAUSE:
                    self.paused_at = epoch
            if stopping and not self.judged:
                self.interrupted |= self.last_epoch is None or epoch < self.last_epoch
        # Recorded after the collective part: a failure to write fails no partner midway.
        if services.record_epoch is not None:
            services.record_epoch(self.individual_id, epoch, time.time(), values)
        if services.metric_check is not None and self.is_leader:
            services.metric_check.saw(values)
        self._answer_partners()
        return stopping or self.judged

    def stop_requested(self) -> bool:
        """Whether the job is asked to stop (a signal, the wall time): the evaluation is then
        recorded as interrupted, whatever it returns. :meth:`report` asks at each epoch; this
        is for an objective that waits long between two (a command objective, between two
        lines of its script). Collective, as :meth:`report`."""
        self._open("stop_requested")
        services = self._services
        if services.should_stop is None:
            return False
        with services.together("ctx.stop_requested()"):
            stopping = services.should_stop()
        self.interrupted |= stopping
        self._answer_partners()
        return stopping

    def _answer_partners(self) -> None:
        """On the leader: its island loop answers what its partners asked meanwhile."""
        answer = self._services.answer_partners
        if answer is not None and self.is_leader:
            with alarm_held():  # the evaluation's timeout waits: never cut a message short
                answer()

    @property
    def judged(self) -> bool:
        """Whether pruning stopped or paused this evaluation."""
        return self.pruned_at is not None or self.paused_at is not None

    def keep_weights(self, state_dict: Mapping[str, Any], loss: float) -> None:
        """Offer this evaluation's weights (plain tensors; a DDP model's ``module.`` prefix is
        taken off, so that they load into the bare model), as often as they improve: the
        individual keeps its best offer; a loss that is not a number keeps nothing (said once).

        The leader stores them (HDF5, no pickle, with the individual's parameters) if the loss
        ranks among the run's best ``record.top_models``. Not collective: other ranks may call
        it too, it does nothing there.
        """
        self._open("keep_weights")
        self.offered = True
        if self._services.offer_weights is not None and self.is_leader:
            self._services.offer_weights(self.individual_id, float(loss),
                                         without_ddp_prefix(state_dict), self._params)

    def save_checkpoint(self, state: Any, epoch: int) -> bool:
        """Keep ``state`` as this evaluation's checkpoint after ``epoch``; whether it was saved.

        Collective: call it on every rank of the worker with the same epoch (within
        ``distributed.timeout`` of each other, else it raises on the ranks that called it,
        naming the others). The leader writes its own ``state`` (every DDP replica holds the
        same), the other ranks' is not read. ``state``: nested dicts, lists and tuples of
        tensors (any dtype and device), numpy arrays, numbers, strings, bytes and None (e.g.
        model, optimizer, scheduler, scaler and RNG states), stored bit for bit without pickle.
        False when not saved: no checkpoint store in this job, ``record.checkpoint_limit_mb``
        reached, or a full disk (the job then stops; the previous checkpoint is kept).
        """
        self._open("save_checkpoint")
        saved = self._checkpoints.save(state, epoch)
        if saved:
            self.saved_at = int(epoch)
        return saved

    def load_checkpoint(self, map_location: Any = None) -> Checkpoint | None:
        """This individual's last checkpoint (``.state``, ``.epoch``), or None: train from
        scratch. A child bred to inherit that has none of its own gets its parent's (see
        :attr:`inherited`). Tensors come back on the CPU, or on ``map_location`` (e.g.
        ``ctx.device``).

        Collective: call it on every rank of the worker (as :meth:`save_checkpoint`); every
        rank reads the file. A damaged or foreign file is not loaded: None, with a warning
        naming the file.
        """
        self._open("load_checkpoint")
        return self._checkpoints.load(map_location)

    @property
    def inherited(self) -> Inherited | None:
        """Where this evaluation's training started, if from another individual's checkpoint
        (``.individual``, ``.epoch``): known once :meth:`load_checkpoint` returned that state
        (or, for an evaluation continued from its own checkpoint, from its earlier part). An
        objective continues numbering epochs after ``.epoch``. None: it trains from scratch."""
        if self._calls is None:  # no checkpoint call: the lineage it came with, if any
            return lineage_of(self._about)
        return self._calls.inherited

    def decline_inherited(self, reason: str) -> None:
        """Say that the state :meth:`load_checkpoint` inherited does not fit (e.g. the model's
        shapes differ) and this evaluation trains from scratch: one warning, and the record
        shows no inheritance. Not collective; call it on every rank that loaded the state."""
        self._open("decline_inherited")
        self._checkpoints.decline(reason)

    @property
    def _checkpoints(self) -> CheckpointCalls:
        """Made by the first checkpoint call: an evaluation without one (most) pays nothing."""
        if self._calls is None:
            self._calls = CheckpointCalls(self._services, self.individual_id, self._about)
        return self._calls
