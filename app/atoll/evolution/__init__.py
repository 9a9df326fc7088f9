"""Search logic, pure: operators (select, cross, mutate, init) composed into pipelines, and
the strategies an island breeds with (``ask`` a candidate, ``tell`` every result)."""

from atoll.evolution.base import ANY, Compose, Conditional, Propagator
from atoll.evolution.crossover import CrossoverUniform
from atoll.evolution.default import GA, default_propagator, ga_strategy, island_strategy
from atoll.evolution.init import InitUniform
from atoll.evolution.mutation import IntervalMutationNormal, PointMutation
from atoll.evolution.selection import SelectBest, SelectTournament, SelectUniform
from atoll.evolution.strategy import Continue, Proposal, Strategy

__all__ = [
    "ANY",
    "Compose",
    "Conditional",
    "Continue",
    "CrossoverUniform",
    "GA",
    "InitUniform",
    "IntervalMutationNormal",
    "PointMutation",
    "Propagator",
    "Proposal",
    "SelectBest",
    "SelectTournament",
    "SelectUniform",
    "Strategy",
    "default_propagator",
    "ga_strategy",
    "island_strategy",
]
