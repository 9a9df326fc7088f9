"""Mutations: one individual in, one changed copy out.

The output is always a new object with its own ``params`` dict, never the input. An evaluated
input (``id >= 0``) becomes a child of it (``origin=GA``, ``parents=(id, -1)``); an unevaluated
child (``id == -1``, e.g. fresh from crossover) keeps its parents and origin, so a pipeline's
lineage survives any number of mutation steps.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from atoll.evolution.base import (
    OneToOne,
    check_arity,
    check_count,
    check_probability,
    distinct_indices,
)
from atoll.evolution.step_size import StepScale
from atoll.individual import NO_PARENT, Individual, Origin
from atoll.space import CategoricalParam, IntParam, Param, Params, Space


def _derive(individual: Individual, params: Params) -> Individual:
    if individual.id >= 0:
        return Individual(id=-1, params=params, origin=Origin.GA,
                          parents=(individual.id, NO_PARENT))
    return Individual(id=-1, params=params, origin=individual.origin,
                      parents=individual.parents)


def _resample_other(param: Param, value: object, rng: random.Random) -> object:
    """A fresh value that differs from ``value`` whenever the parameter has another one."""
    if isinstance(param, CategoricalParam):
        if len(param.choices) > 1 and value in param.choices:
            i = rng.randrange(len(param.choices) - 1)
            return param.choices[i + (i >= param.index(value))]
    elif isinstance(param, IntParam) and param.high > param.low:
        current = param.clip(value)
        i = rng.randrange(param.low, param.high)
        return i + (i >= current)
    return param.sample(rng)


@dataclass(frozen=True)
class PointMutation(OneToOne):
    """With ``probability``, resample ``points`` distinct parameters from the whole space.

    A resampled categorical, ordinal or int always differs from its current value when the
    parameter has another one (a float differs almost surely), so an applied mutation changes
    exactly ``points`` parameters. Propulate's may redraw the same value; this wastes no evaluation.
    """

    space: Space = field(repr=False)
    probability: float
    points: int = 1

    def __post_init__(self) -> None:
        check_probability("PointMutation.probability", self.probability)
        check_count("PointMutation.points", self.points)
        if self.points > len(self.space):
            raise ValueError(f"PointMutation: points={self.points} but the space has only "
                             f"{len(self.space)} parameter(s)")

    def __call__(self, individuals: Sequence[Individual],
                 rng: random.Random) -> list[Individual]:
        check_arity(self, individuals, 1)
        params = dict(individuals[0].params)
        if rng.random() < self.probability:
            for i in distinct_indices(rng, len(self.space), self.points):
                param = self.space.params[i]
                params[param.name] = _resample_other(param, params[param.name], rng)
        return [_derive(individuals[0], params)]


def interval_params(space: Space) -> tuple[Param, ...]:
    """The parameters a Gaussian step can move: floats, ints and ordinals (not categoricals)."""
    return tuple(p for p in space.params if not isinstance(p, CategoricalParam) or p.ordered)


@dataclass(frozen=True)
class IntervalMutationNormal(OneToOne):
    """With ``probability``, move ``points`` distinct non-categorical parameters by Gaussian noise.

    The step is taken in the unit view of each parameter, ``from_unit(to_unit(v) + N(0, s))``
    with ``s = sigma_factor``: a fraction of the range for linear floats (as in Propulate, where
    sigma is ``sigma_factor`` times the interval width), a fraction of the log-range for log floats
    (a multiplicative step), and a move to nearby values for ints and ordinals. Values past a bound
    are clipped to it, and the result keeps its type. Propulate moves floats only. With a
    ``scale`` (a worker's, adapted by :class:`~atoll.evolution.step_size.SuccessRule`) the step
    is ``sigma_factor * scale.value``.
    """

    space: Space = field(repr=False)
    sigma_factor: float
    probability: float
    points: int = 1
    scale: StepScale | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.sigma_factor >= 0.0:
            raise ValueError(f"IntervalMutationNormal.sigma_factor must be >= 0, "
                             f"got {self.sigma_factor!r}")
        check_probability("IntervalMutationNormal.probability", self.probability)
        check_count("IntervalMutationNormal.points", self.points)
        movable = len(self._movable)
        if self.points > movable:
            raise ValueError(f"IntervalMutationNormal: points={self.points} but the space has "
                             f"only {movable} float, int or ordinal parameter(s)")

    @functools.cached_property
    def _movable(self) -> tuple[Param, ...]:
        return interval_params(self.space)

    def __call__(self, individuals: Sequence[Individual],
                 rng: random.Random) -> list[Individual]:
        check_arity(self, individuals, 1)
        params = dict(individuals[0].params)
        if rng.random() < self.probability:
            movable = self._movable
            sigma = self.sigma_factor * (self.scale.value if self.scale else 1.0)
            for i in distinct_indices(rng, len(movable), self.points):
                param = movable[i]
                step = rng.gauss(0.0, sigma)
                params[param.name] = param.from_unit(param.to_unit(params[param.name]) + step)
        return [_derive(individuals[0], params)]
