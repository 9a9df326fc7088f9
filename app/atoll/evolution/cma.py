"""An asynchronous CMA-ES strategy for one island, on the ``cmaes`` library (Optuna's).

There is no generation barrier: the strategy samples (``ask``) whenever its worker needs a
candidate, and updates (``tell``) once a population's worth of new results has arrived, from any
worker of the island, bred under any earlier distribution, or immigrated from another island
(CMA-ES's update takes any points with their losses). Each worker leader holds its own instance
and learns from the island's results it knows, so the island's instances follow one another
closely without a message of their own.

Space: the numeric parameters (floats, ints, ordinals) are searched in their unit view (log
parameters in log space), so one step size fits all; ints and ordinals are rounded by
``from_unit``, without CMA-ES's margin correction (a known limit for narrow integer ranges).
Categorical parameters are taken from the best individual the island knows, each redrawn
uniformly with probability ``1 / (number of parameters)`` (the GA's point mutation), or sampled
while no result is known.

Restarts: when CMA-ES's own stopping tests fire (its step size or the spread of its losses has
collapsed), it restarts around the best point with twice the population (IPOP-CMA-ES).

Resume: the strategy is rebuilt from the record, since a resumed island's population holds every
recorded result and the first call learns them all, in order of id, a population at a time.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
from cmaes import CMA

from atoll.evolution.base import ANY
from atoll.evolution.mutation import interval_params
from atoll.individual import NO_PARENT, Individual, Origin
from atoll.space import Param, Space

INITIAL_SIGMA = 0.3
"""In unit space: a third of every range, the usual start for a box-bounded search."""


class CMAES:
    """A propagator that breeds one individual at a time from an evolving CMA-ES distribution."""

    parents = ANY
    offspring = 1

    def __init__(self, space: Space, population_size: int = 0) -> None:
        self.space = space
        self.numeric: tuple[Param, ...] = interval_params(space)
        self.categorical = tuple(p for p in space.params if p not in self.numeric)
        self.population_size = population_size  # 0: CMA-ES's default, 4 + 3 ln(d)
        self.restarts = 0
        self._cma: CMA | None = None
        self._seen: set[int] = set()
        self._pending: list[tuple[np.ndarray, float]] = []

    def __repr__(self) -> str:
        return f"CMAES(numeric={len(self.numeric)}, categorical={len(self.categorical)})"

    @property
    def mean(self) -> np.ndarray | None:
        """The distribution's mean in unit space (None before the first call)."""
        return None if self._cma is None else self._cma.mean.copy()

    def __call__(self, individuals: Sequence[Individual],
                 rng: random.Random) -> list[Individual]:
        if self._cma is None:
            self._cma = self._new_cma(rng, np.full(len(self.numeric), 0.5),
                                      self.population_size or None)
        self._learn(individuals, rng)
        params = self._categoricals(individuals, rng)
        if self.numeric:
            point = self._cma.ask()
            params.update({p.name: p.from_unit(float(u))
                           for p, u in zip(self.numeric, point[: len(self.numeric)],
                                           strict=True)})
        params = {p.name: params[p.name] for p in self.space.params}
        return [Individual(id=-1, params=params, origin=Origin.BRED,
                           parents=(NO_PARENT, NO_PARENT))]

    def _new_cma(self, rng: random.Random, mean: np.ndarray, size: int | None) -> CMA:
        dims = max(len(self.numeric), 1)
        bounds = np.tile([0.0, 1.0], (dims, 1))
        start = np.clip(np.resize(mean, dims), 0.0, 1.0)
        # cmaes needs 2+ dimensions for its covariance; one parameter gets a dummy second axis.
        if dims == 1:
            bounds, start = np.tile([0.0, 1.0], (2, 1)), np.append(start, 0.5)
        return CMA(mean=start, sigma=INITIAL_SIGMA, bounds=bounds, population_size=size,
                   seed=rng.getrandbits(31))

    def _learn(self, individuals: Sequence[Individual], rng: random.Random) -> None:
        """Tell CMA-ES every new result, a population at a time, in order of id."""
        new = sorted((i for i in individuals if i.id not in self._seen), key=lambda i: i.id)
        for ind in new:
            self._seen.add(ind.id)
            if ind.usable and self.numeric:
                self._pending.append((self._point(ind), ind.loss))
        assert self._cma is not None
        size = self._cma.population_size
        while len(self._pending) >= size:
            batch, self._pending = self._pending[:size], self._pending[size:]
            self._cma.tell(batch)
            if self._cma.should_stop():
                self._restart(individuals, rng)
                size = self._cma.population_size

    def _point(self, ind: Individual) -> np.ndarray:
        point = np.array([p.to_unit(ind.params[p.name]) for p in self.numeric])
        return np.append(point, 0.5) if len(point) == 1 else point

    def _restart(self, individuals: Sequence[Individual], rng: random.Random) -> None:
        """IPOP: twice the population, around the best point known."""
        assert self._cma is not None
        best = min((i for i in individuals if i.usable), key=lambda i: i.loss, default=None)
        mean = self._point(best) if best is not None else np.full(len(self.numeric), 0.5)
        self.restarts += 1
        self._cma = self._new_cma(rng, mean[: len(self.numeric)],
                                  2 * self._cma.population_size)
        self._pending.clear()

    def _categoricals(self, individuals: Sequence[Individual],
                      rng: random.Random) -> dict[str, object]:
        if not self.categorical:
            return {}
        best = min((i for i in individuals if i.usable), key=lambda i: i.loss, default=None)
        if best is None:
            return {p.name: p.sample(rng) for p in self.categorical}
        rate = 1.0 / len(self.space.params)
        return {p.name: p.sample(rng) if rng.random() < rate else best.params[p.name]
                for p in self.categorical}

