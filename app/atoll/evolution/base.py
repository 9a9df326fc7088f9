"""The propagator interface and the two combinators that build pipelines from operators.

A propagator is a pure function of ``(individuals, rng)``: it reads ``params``, ``loss`` and ``id``
and returns a list. It holds no rng of its own, so every caller (island, worker, test) owns its
stream and a seed reproduces a run. Each declares its arity so that :class:`Compose` can reject a
pipeline that could never work when it is built, not on the thousandth call.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import ClassVar, Protocol

from atoll.individual import Individual

ANY = -1
"""Arity meaning "any number" for ``parents`` and "as many as it got" for ``offspring``."""


class Propagator(Protocol):
    """Turns individuals into individuals.

    ``parents`` is how many it consumes (:data:`ANY`: any number, e.g. a whole population);
    ``offspring`` how many it returns (:data:`ANY`: as many as it got). They are read-only
    properties here so that a plain attribute, a dataclass field or a property all satisfy it.
    """

    @property
    def parents(self) -> int: ...

    @property
    def offspring(self) -> int: ...

    def __call__(self, individuals: Sequence[Individual],
                 rng: random.Random) -> list[Individual]: ...


class FixedArity:
    """Arity set by the operator's class: ``PARENTS`` in, ``OFFSPRING`` out."""

    PARENTS: ClassVar[int]
    OFFSPRING: ClassVar[int]

    @property
    def parents(self) -> int:
        return self.PARENTS

    @property
    def offspring(self) -> int:
        return self.OFFSPRING


class OneToOne(FixedArity):
    """Arity of an operator that turns one individual into one (mutations)."""

    PARENTS = OFFSPRING = 1


class Selection:
    """Arity of an operator that picks ``k`` individuals from any number (selections)."""

    k: int

    @property
    def parents(self) -> int:
        return ANY

    @property
    def offspring(self) -> int:
        return self.k


def distinct_indices(rng: random.Random, n: int, k: int) -> list[int]:
    """``k`` distinct indices from ``range(n)`` in random order.

    The same distribution as ``rng.sample(range(n), k)`` but several times faster for the small
    ``k`` breeding uses (it runs several times per evaluation): draws are rejected until
    distinct, with ``int(random() * n)`` (uniform up to float rounding, about n / 2**53).
    """
    if k * 2 > n:
        return rng.sample(range(n), k)
    picked: list[int] = []
    while len(picked) < k:
        i = int(rng.random() * n)
        if i not in picked:
            picked.append(i)
    return picked


def check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")


def check_count(name: str, value: int, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_arity(op: object, individuals: Sequence[Individual], expected: int) -> None:
    """Fail loudly when an operator is fed the wrong number of individuals at call time."""
    if len(individuals) != expected:
        raise ValueError(f"{op!r} takes {expected} individual(s), got {len(individuals)}")


def _fits(produced: int, consumed: int) -> bool:
    return produced == ANY or consumed == ANY or produced == consumed


class Compose:
    """Pipes each operator's output into the next one's input.

    Arity is checked when built: the count flowing out of each step (resolved through steps whose
    ``offspring`` is :data:`ANY`) must fit the next step's ``parents``.
    """

    def __init__(self, operators: Sequence[Propagator]) -> None:
        if not operators:
            raise ValueError("Compose needs at least one operator")
        flowing = operators[0].parents
        for i, op in enumerate(operators):
            if i and not _fits(flowing, op.parents):
                raise ValueError(
                    f"Compose: step {i - 1} ({operators[i - 1]!r}) yields {flowing} individual(s) "
                    f"but step {i} ({op!r}) takes {op.parents}")
            if op.offspring != ANY:
                flowing = op.offspring
        self.operators: tuple[Propagator, ...] = tuple(operators)
        self.parents: int = operators[0].parents
        self.offspring: int = flowing

    def __call__(self, individuals: Sequence[Individual],
                 rng: random.Random) -> list[Individual]:
        # No copy of the input: the island's whole ranked population comes in on every breed,
        # and operators never modify what they are given.
        current: Sequence[Individual] = individuals
        for op in self.operators:
            current = op(current, rng)
        return list(current)

    def __repr__(self) -> str:
        return f"Compose({list(self.operators)!r})"


class Conditional:
    """Applies ``if_full`` once there are ``population_size`` individuals, else ``otherwise``.

    The usual ``otherwise`` is a random init that fills the population before breeding starts.
    Both branches must yield the same number of offspring, so callers never see the switch.
    """

    def __init__(self, population_size: int, if_full: Propagator, otherwise: Propagator) -> None:
        check_count("population_size", population_size)
        if if_full.offspring != otherwise.offspring:
            raise ValueError(
                f"Conditional: if_full ({if_full!r}) yields {if_full.offspring} individual(s) but "
                f"otherwise ({otherwise!r}) yields {otherwise.offspring}; they must match")
        self.population_size = population_size
        self.if_full = if_full
        self.otherwise = otherwise
        self.parents: int = ANY
        self.offspring: int = if_full.offspring

    def __call__(self, individuals: Sequence[Individual],
                 rng: random.Random) -> list[Individual]:
        branch = self.if_full if len(individuals) >= self.population_size else self.otherwise
        return branch(individuals, rng)

    def __repr__(self) -> str:
        return (f"Conditional({self.population_size}, if_full={self.if_full!r}, "
                f"otherwise={self.otherwise!r})")
