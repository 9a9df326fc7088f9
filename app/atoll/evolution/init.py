"""Random initialisation: fresh individuals sampled uniformly from the space."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from atoll.evolution.base import ANY, check_arity, check_probability
from atoll.individual import NO_PARENT, Individual, Origin
from atoll.space import Space


@dataclass(frozen=True)
class InitUniform:
    """With ``probability``, one fresh random individual; otherwise the single input, untouched.

    One class serves both uses, and its arity follows from ``probability``:

    - ``probability == 1`` (the fill branch of :class:`Conditional`): it always samples, ignores its
      input, and so takes any number of individuals (``parents = ANY``), an empty population too.
    - ``probability < 1`` (last step of a breeding pipeline, "random init"): it must have exactly
      one individual to pass through when it does not sample, so ``parents = 1`` and
      :class:`Compose` checks that the step before it yields one.

    Either way it returns exactly one individual. A fresh one has ``origin=RANDOM`` and no parents.
    """

    space: Space = field(repr=False)
    probability: float = 1.0

    def __post_init__(self) -> None:
        check_probability("InitUniform.probability", self.probability)

    @property
    def parents(self) -> int:
        return ANY if self.probability >= 1.0 else 1

    @property
    def offspring(self) -> int:
        return 1

    def __call__(self, individuals: Sequence[Individual],
                 rng: random.Random) -> list[Individual]:
        if self.parents != ANY:
            check_arity(self, individuals, 1)
            if rng.random() >= self.probability:
                return [individuals[0]]
        return [Individual(id=-1, params=self.space.sample(rng), origin=Origin.RANDOM,
                           parents=(NO_PARENT, NO_PARENT))]
