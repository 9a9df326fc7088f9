"""The strategy interface: ``ask`` for the next candidate, ``tell`` of every result.

Operators (:mod:`atoll.evolution.base`) are pure functions of ``(individuals, rng)``. A strategy
may keep state (CMA-ES's distribution, the GA's step size, the hybrid's credit per strategy), and it
learns only through :meth:`Strategy.tell`, which the island loop calls once for every result the
island learns: the worker's own, a partner's, an immigrant, and on resume every restored one in
order of id. So a strategy never scans the population for what changed, nor reads a candidate's
loss behind the loop's back; replaying the tells rebuilds it (DEHB's and Optuna's contract).

``ask`` answers either with a new candidate (an :class:`~atoll.individual.Individual` carrying the
id the loop gave it) or with :class:`Continue`: evaluate this paused or interrupted individual
again from its checkpoint, under its own id.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from atoll.individual import Individual, Status


@dataclass(frozen=True)
class Continue:
    """Evaluate ``individual`` again (same id and parameters) from its last checkpoint."""

    individual: Individual


Proposal = Individual | Continue


class Strategy(Protocol):
    """Breeds for one worker of an island."""

    def ask(self, ranked: Sequence[Individual], rng: random.Random, ident: int) -> Proposal:
        """The next candidate, given the island's active usable individuals best first
        (read-only); a new one gets id ``ident``."""
        ...

    def tell(self, result: Individual) -> None:
        """A result the island learned (any status), read-only; called once per id, except
        that a paused one (``asha``) is told at each rung it pauses at and once more when it
        finishes."""
        ...


class ContinueFirst:
    """Continues ``waiting`` individuals, one per ask, before ``strategy`` breeds new ones."""

    def __init__(self, strategy: Strategy, waiting: Sequence[Individual]) -> None:
        self.strategy = strategy
        self.waiting = list(reversed(waiting))

    def __repr__(self) -> str:
        return f"ContinueFirst({self.strategy!r}, waiting={len(self.waiting)})"

    def ask(self, ranked: Sequence[Individual], rng: random.Random, ident: int) -> Proposal:
        if self.waiting:
            return Continue(self.waiting.pop())
        return self.strategy.ask(ranked, rng, ident)

    def tell(self, result: Individual) -> None:
        self.strategy.tell(result)


class Rungs(Protocol):
    """Which paused individuals qualify for promotion now
    (:class:`atoll.scheduling.asha.Asha`)."""

    def promotable(self, paused: Iterable[int]) -> list[tuple[int, int]]:
        """(id, epoch of its rung) of those that qualify, the first to promote first."""
        ...


Claim = Callable[[int, int], str]
"""(id, epoch) -> "won" (this worker continues it), "taken" or "gone" (forget it: another
worker continues it, or it finished), "stale" (not from that epoch: ask again later); see
:func:`atoll.record.promotion.claim`."""


class PromoteFirst:
    """ASHA's promotions: continue the best paused individual of the island that qualifies
    now, and breed with ``strategy`` only when none does.

    Paused individuals are learned from ``tell`` (the island's results: this worker's and its
    partners'), so each worker of the island knows them all; ``claim`` makes sure only one of
    them continues each. A paused result is told to ``strategy`` too, as a partial one (CMA-ES
    learns it: :mod:`atoll.evolution.cma`), again at each rung it pauses at; it is never a
    parent (the population ranks only completed ones).
    """

    def __init__(self, strategy: Strategy, rungs: Rungs, claim: Claim,
                 paused: Sequence[Individual] = ()) -> None:
        self.strategy = strategy
        self.rungs = rungs
        self.claim = claim
        self.paused = {ind.id: ind for ind in paused}

    def __repr__(self) -> str:
        return f"PromoteFirst({self.strategy!r}, paused={len(self.paused)})"

    def ask(self, ranked: Sequence[Individual], rng: random.Random, ident: int) -> Proposal:
        for paused, epoch in self.rungs.promotable(self.paused):
            outcome = self.claim(paused, epoch)
            if outcome == "won":
                return Continue(self.paused.pop(paused))
            if outcome != "stale":
                del self.paused[paused]
        return self.strategy.ask(ranked, rng, ident)

    def tell(self, result: Individual) -> None:
        if result.status == Status.PAUSED:
            self.paused[result.id] = result
        else:
            self.paused.pop(result.id, None)
        self.strategy.tell(result)


class Told:
    """Results told since a strategy last asked, handed over in order of id.

    The order results arrive in depends on message timing; learning them in order of id makes
    what a strategy learned at an ``ask`` independent of it (and the same on resume)."""

    def __init__(self) -> None:
        self._new: list[Individual] = []

    def add(self, result: Individual) -> None:
        self._new.append(result)

    def take(self) -> list[Individual]:
        new, self._new = sorted(self._new, key=lambda i: i.id), []
        return new
