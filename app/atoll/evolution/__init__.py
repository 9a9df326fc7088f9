"""Propagators: small pure operators (select, cross, mutate, init) composed into pipelines."""

from atoll.evolution.base import ANY, Compose, Conditional, Propagator
from atoll.evolution.crossover import CrossoverUniform
from atoll.evolution.default import default_propagator
from atoll.evolution.init import InitUniform
from atoll.evolution.mutation import IntervalMutationNormal, PointMutation
from atoll.evolution.selection import SelectBest, SelectTournament, SelectUniform

__all__ = [
    "ANY",
    "Compose",
    "Conditional",
    "CrossoverUniform",
    "InitUniform",
    "IntervalMutationNormal",
    "PointMutation",
    "Propagator",
    "SelectBest",
    "SelectTournament",
    "SelectUniform",
    "default_propagator",
]
