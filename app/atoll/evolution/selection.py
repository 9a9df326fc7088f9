"""Selections: pick individuals from a population; they return the input objects themselves."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from atoll.evolution.base import Selection, check_count, distinct_indices
from atoll.individual import Individual


def _loss_key(individual: Individual) -> float:
    """Lower is better; a NaN loss (not evaluated, failed) ranks last."""
    return math.inf if math.isnan(individual.loss) else individual.loss


@dataclass(frozen=True)
class SelectBest(Selection):
    """The ``k`` best individuals, or all of them when there are fewer.

    Contract: the input is already sorted by loss, best first. The island loop keeps its
    population sorted on insertion, so this takes the first ``k`` without sorting again (an
    O(k) slice on every breed instead of an O(n log n) sort). Unsorted input gives the first
    ``k`` as they come.
    """

    k: int

    def __post_init__(self) -> None:
        check_count("SelectBest.k", self.k)

    def __call__(self, individuals: Sequence[Individual],
                 rng: random.Random) -> list[Individual]:
        return list(individuals[: self.k])


@dataclass(frozen=True)
class SelectUniform(Selection):
    """``k`` distinct individuals uniformly at random (all, shuffled, when there are fewer)."""

    k: int

    def __post_init__(self) -> None:
        check_count("SelectUniform.k", self.k)

    def __call__(self, individuals: Sequence[Individual],
                 rng: random.Random) -> list[Individual]:
        picks = distinct_indices(rng, len(individuals), min(self.k, len(individuals)))
        return [individuals[i] for i in picks]


@dataclass(frozen=True)
class SelectTournament(Selection):
    """``k`` winners of tournaments among ``size`` distinct random contestants; lowest loss wins.

    Tournaments are independent, so a strong individual may win more than once; ``size`` sets
    the pressure (1 is uniform selection, the population size is :class:`SelectBest` of one).
    An empty input gives an empty list.
    """

    k: int
    size: int = 3

    def __post_init__(self) -> None:
        check_count("SelectTournament.k", self.k)
        check_count("SelectTournament.size", self.size)

    def __call__(self, individuals: Sequence[Individual],
                 rng: random.Random) -> list[Individual]:
        if not individuals:
            return []
        size = min(self.size, len(individuals))
        winners = []
        for _ in range(self.k):
            contestants = distinct_indices(rng, len(individuals), size)
            winners.append(min((individuals[i] for i in contestants), key=_loss_key))
        return winners
