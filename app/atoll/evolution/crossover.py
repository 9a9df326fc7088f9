"""Crossover: two parents make one child."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from atoll.evolution.base import FixedArity, check_arity, check_probability
from atoll.individual import Individual, Origin


@dataclass(frozen=True)
class CrossoverUniform(FixedArity):
    """With ``probability``, each gene comes from either parent with equal chance; otherwise the
    child copies the first parent (later mutation steps then make it differ).

    The child is always a new, unevaluated individual (``id=-1``) that records both parents.
    """

    PARENTS, OFFSPRING = 2, 1
    probability: float

    def __post_init__(self) -> None:
        check_probability("CrossoverUniform.probability", self.probability)

    def __call__(self, individuals: Sequence[Individual],
                 rng: random.Random) -> list[Individual]:
        check_arity(self, individuals, 2)
        first, second = individuals
        params = dict(first.params)
        if rng.random() < self.probability:
            from_second = rng.getrandbits(len(params))  # one fair coin per gene
            for name in params:
                if from_second & 1:
                    params[name] = second.params[name]
                from_second >>= 1
        return [Individual(id=-1, params=params, origin=Origin.GA,
                           parents=(first.id, second.id))]
