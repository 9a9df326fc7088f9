"""One evaluated (or to-be-evaluated) point of the search, as every part of Atoll sees it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import IntEnum

from atoll.space import Params


class Status(IntEnum):
    """How an evaluation ended. Stored as its integer in messages and HDF5 (enum attribute)."""

    OK = 0
    FAILED = 1
    PRUNED = 2
    INTERRUPTED = 3
    PAUSED = 4  # successive halving's promotion form: stopped at a rung with its checkpoint
    # kept, until its island promotes it (continued under its id) or the run ends


FINISHED = (Status.OK, Status.FAILED, Status.PRUNED)
"""Statuses of an evaluation that is over: each spends one evaluation of the run's budget. An
interrupted one does not (a later job continues it), nor a paused one (until it is promoted and
finishes)."""


class Origin(IntEnum):
    """How the parameters were made: at random, or which strategy bred them (its own column in
    the record, so that views and strategies never infer it)."""

    RANDOM = 0  # sampled from the space (initial population or random init)
    GA = 1  # bred by the genetic algorithm's operators from parents
    CMAES = 2  # sampled from CMA-ES's distribution (no parents)
    PBT = 3  # population-based training: a member's copy, perturbed or resampled if exploited


NO_PARENT = -1
NO_EPOCH = -1


@dataclass(slots=True)
class Individual:
    """A candidate with its bookkeeping.

    Operators only read ``params`` and ``loss``; the island loop owns the rest. ``island`` is the
    island the individual is active on now, ``owner`` the worker there that alone may emigrate it,
    and ``version`` counts its migrations so that late messages about an older copy are ignored.
    ``inherit_from`` is the individual whose checkpoint its training starts from (set when it is
    bred, kept only if the objective took that state), ``inherit_epoch`` that checkpoint's epoch
    (known once loaded); :data:`NO_PARENT` and :data:`NO_EPOCH` when it trained from scratch.
    """

    id: int
    params: Params
    island: int = 0
    worker: int = 0
    generation: int = 0
    owner: int = 0
    version: int = 0
    parents: tuple[int, int] = (NO_PARENT, NO_PARENT)
    origin: Origin = Origin.RANDOM
    inherit_from: int = NO_PARENT
    inherit_epoch: int = NO_EPOCH
    loss: float = math.nan
    status: Status = Status.OK
    born: float = 0.0
    started: float = 0.0
    finished: float = 0.0
    active: bool = True
    error: str = field(default="", repr=False)

    @property
    def usable(self) -> bool:
        """Whether it may be a parent: evaluated fine with a finite loss."""
        return self.status == Status.OK and math.isfinite(self.loss)


def replaced_member(ind: Individual) -> int:
    """The PBT member whose place ``ind`` takes (:data:`NO_PARENT` for a new one or another
    strategy's): PBT's children name it last among their parents, (source, member) when it
    copied another member, (member, none) when it trained its own member on."""
    if ind.origin != Origin.PBT:
        return NO_PARENT
    return ind.parents[1] if ind.parents[1] != NO_PARENT else ind.parents[0]
