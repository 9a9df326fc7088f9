"""One evaluated (or to-be-evaluated) point of the search, as every part of Atoll sees it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

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


FIELDS: tuple[tuple[str, str], ...] = (
    ("id", "i8"), ("island", "i4"), ("worker", "i4"), ("generation", "i8"),
    ("parent_a", "i8"), ("parent_b", "i8"), ("inherit_from", "i8"), ("inherit_epoch", "i4"),
    ("origin", "i1"), ("status", "i1"), ("version", "i4"), ("born", "f8"), ("started", "f8"),
    ("finished", "f8"), ("loss", "f8"))
"""The fixed fields an individual has in the record's rows and in messages, in this order, with
their numpy types: the one list the HDF5 schema, the wire format, the writer and restoring derive
theirs from (:func:`fields_of`, :func:`from_fields`). ``parents`` is two fields; ``owner`` and
``active`` are a live island's (messages add ``owner``), ``error`` the record's."""

FIELD_NAMES = tuple(name for name, _ in FIELDS)


def fields_of(ind: Individual) -> tuple[Any, ...]:
    """``ind``'s :data:`FIELDS`, in order."""
    return (ind.id, ind.island, ind.worker, ind.generation, ind.parents[0], ind.parents[1],
            ind.inherit_from, ind.inherit_epoch, ind.origin, ind.status, ind.version, ind.born,
            ind.started, ind.finished, ind.loss)


def from_fields(values: Sequence[Any], params: Params) -> Individual:
    """The individual whose :data:`FIELDS` are ``values`` (in order) and parameters
    ``params``; its ``owner`` is 0 until its island says."""
    (ident, island, worker, generation, parent_a, parent_b, inherit_from, inherit_epoch, origin,
     status, version, born, started, finished, loss) = values
    return Individual(
        id=ident, params=params, island=island, worker=worker, generation=generation,
        version=version, parents=(parent_a, parent_b), origin=_ORIGINS[origin],
        inherit_from=inherit_from, inherit_epoch=inherit_epoch, loss=loss,
        status=_STATUSES[status], born=born, started=started, finished=finished)


_ORIGINS = {int(o): o for o in Origin}  # a lookup is cheaper than the enum's call
_STATUSES = {int(s): s for s in Status}

def about_of(ind: Individual) -> dict[str, Any]:
    """What a checkpoint keeps of its individual (JSON), so that a job that finds the
    checkpoint but no row of it can continue it under its id (:func:`from_about`)."""
    return {"params": ind.params, "origin": int(ind.origin), "parents": list(ind.parents),
            "born": ind.born, "inherit_from": ind.inherit_from,
            "inherit_epoch": ind.inherit_epoch}


def from_about(ident: int, kept: Mapping[str, Any], params: Params) -> Individual:
    """The interrupted individual ``ident`` as its checkpoint's :func:`about_of` kept it."""
    parents = kept.get("parents", [NO_PARENT, NO_PARENT])
    return Individual(
        id=ident, params=params, parents=(int(parents[0]), int(parents[1])),
        inherit_from=int(kept.get("inherit_from", NO_PARENT)),
        inherit_epoch=int(kept.get("inherit_epoch", NO_EPOCH)),
        origin=Origin(int(kept.get("origin", Origin.RANDOM))),
        born=float(kept.get("born", 0.0)), status=Status.INTERRUPTED)


def replaced_member(ind: Individual) -> int:
    """The PBT member whose place ``ind`` takes (:data:`NO_PARENT` for a new one or another
    strategy's): PBT's children name it last among their parents, (source, member) when it
    copied another member, (member, none) when it trained its own member on."""
    if ind.origin != Origin.PBT:
        return NO_PARENT
    return ind.parents[1] if ind.parents[1] != NO_PARENT else ind.parents[0]


def is_copy(ind: Individual) -> bool:
    """Whether ``ind`` came to its island by migration or pollination (its version counts the
    migrations that brought it) rather than being evaluated there. A PBT island's members are
    its own lineages: a copy is no member there, only a top individual to copy from."""
    return ind.version > 0
