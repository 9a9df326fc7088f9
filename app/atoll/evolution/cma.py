"""An asynchronous CMA-ES strategy for one island: ``LeanCMA`` (cmaes's CMA-ES at a fraction of
its cost per call) for continuous spaces, ``LeanCMAwM`` (cmaes's CMA-ES with margin on it) for
spaces with integers.

There is no generation barrier: the strategy samples (``ask``) whenever its worker needs a
candidate, and updates (``tell``) once a population's worth of new results has arrived, from any
worker of the island, bred under any earlier distribution, or immigrated from another island
(CMA-ES's update takes any points with their losses). Each worker leader holds its own instance
and learns from the island's results it knows, so the island's instances follow one another
closely without a message of their own.

Space: the numeric parameters (floats, ints, ordinals) are searched in their unit view (log
parameters in log space), so one step size fits all. Linear ints and ordinals take equal slices of
the unit interval, so they are a lattice there, and CMA-ES with margin (``LeanCMAwM``, the
algorithm of ``cmaes.CMAwM``, Hamano et al. 2022) searches them: it keeps the chance of leaving the
current value above a margin, so a narrow integer range does not freeze once the step is smaller
than one value. A candidate's raw
point (``x_for_tell``) is what the update learns for the worker's own candidate (matched by id when
its result is told); results from elsewhere (the island's other workers, immigrants, the record on
resume) are learned at their values. Log ints are not a lattice in the unit view and are rounded.
Categorical parameters are taken from the best individual the island knows, each redrawn uniformly
with probability ``1 / (number of parameters)`` (the GA's point mutation), or sampled while no
result is known.

Injected results: a result CMA-ES did not sample (bred by the GA of a hybrid island or of
another island, or drawn at random) is learned the way Hansen's "Injecting external solutions
into CMA-ES" (2011) prescribes: its step from the mean is clipped to a Mahalanobis length of
sqrt(n) + 2n / (n + 2), so one far point cannot blow up the step size or the covariance.

Restarts: when CMA-ES's own stopping tests fire (its step size or the spread of its losses has
collapsed), it restarts around the best point with twice the population (IPOP-CMA-ES).

Partial results (``partial``, under successive halving's rungs): a pruned or paused evaluation
is learned too, at the loss it returned where it stopped. Most evaluations stop at a low rung, so
learning only the completed ones would leave the distribution unmoved for dozens of candidates;
as a curve's loss falls with training, a batch ranks the ones that got further first, and those
stopped at one rung among themselves by their value there (the order Optuna's TPE gives pruned
trials). A paused individual that is promoted is learned again when it pauses at a higher rung
or completes: each is a new, better informed result.

Resume: the strategy is rebuilt from the record: the loop tells it every restored result, in order
of id, and it learns them a population at a time.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np
import numpy.random  # noqa: F401  # the first CMA would import it inside the search

from atoll.evolution.lean_cma import LeanCMA
from atoll.evolution.lean_margin import LeanCMAwM
from atoll.evolution.mutation import interval_params
from atoll.evolution.strategy import Told
from atoll.evolution.unit_view import UnitView
from atoll.individual import NO_PARENT, Individual, Origin, Status
from atoll.space import CategoricalParam, IntParam, Param, Space

INITIAL_SIGMA = 1 / 6
"""In unit space: a sixth of every range, as Optuna's CMA-ES sampler starts (a third costs the
step time to shrink first: benchmarks/EARLIER-RUNS.md)."""


PARTIAL = (Status.PRUNED, Status.PAUSED)
"""The results learned as partial ones: stopped or paused at a rung, with the loss there."""


def clip_step(cma: LeanCMA | LeanCMAwM, point: np.ndarray) -> np.ndarray:
    """``point`` moved towards the mean until its step has Mahalanobis length at most
    sqrt(n) + 2n / (n + 2) under the current distribution (Hansen 2011)."""
    mean, sigma, basis, scales = cma.distribution()
    step = (point - mean) / sigma
    length = float(np.linalg.norm(basis @ ((basis.T @ step) / scales)))
    n = len(point)
    limit = math.sqrt(n) + 2.0 * n / (n + 2.0)
    if length <= limit:
        return point
    return mean + sigma * step * (limit / length)


def lattice_size(param: Param) -> int:
    """How many values a linear int or an ordinal has (its unit view is a lattice of that many
    slice centres); 0 for floats and log ints, which CMA-ES treats as continuous."""
    if isinstance(param, IntParam) and not param.log:
        return param.high - param.low + 1
    if isinstance(param, CategoricalParam) and param.ordered:
        return len(param.choices)
    return 0


class CMAES:
    """A strategy that breeds one individual at a time from an evolving CMA-ES distribution."""

    def __init__(self, space: Space, population_size: int = 0, partial: bool = False) -> None:
        self.space = space
        self.partial = partial  # learn pruned and paused results too
        self.numeric: tuple[Param, ...] = interval_params(space)
        self.categorical = tuple(p for p in space.params if p not in self.numeric)
        self._unit = UnitView(self.numeric)
        self.population_size = population_size  # 0: CMA-ES's default, 4 + 3 ln(d)
        self.restarts = 0  # IPOP restarts so far
        self._cma: LeanCMA | LeanCMAwM | None = None
        self._told = Told()
        self._pending: list[tuple[np.ndarray, float, bool]] = []  # point, loss, injected
        self._asked: tuple[int, np.ndarray] | None = None  # the last candidate's id, raw point

    def __repr__(self) -> str:
        return f"CMAES(numeric={len(self.numeric)}, categorical={len(self.categorical)})"

    @property
    def generation(self) -> int:
        """Results per update of the distribution (CMA-ES's population size, which grows with
        each restart)."""
        if self._cma is not None:
            return int(self._cma.population_size)
        return self.population_size or 4 + int(3 * math.log(max(len(self.numeric), 2)))

    @property
    def mean(self) -> np.ndarray | None:
        """The distribution's mean in unit space (None before the first call)."""
        return None if self._cma is None else self._cma.mean.copy()

    def tell(self, result: Individual) -> None:
        self._told.add(result)

    def ask(self, individuals: Sequence[Individual], rng: random.Random,
            ident: int) -> Individual:
        if self._cma is None:
            self._cma = self._new_cma(rng, np.full(len(self.numeric), 0.5),
                                      self.population_size or None)
        self._learn(individuals, rng)
        params = self._categoricals(individuals, rng)
        raw = None
        if self.numeric:
            if isinstance(self._cma, LeanCMAwM):
                point, raw = self._cma.ask()
            else:
                point = self._cma.ask()
            params.update(self._unit.from_unit(point.tolist()[: len(self.numeric)]))
        if self.categorical:
            params = {p.name: params[p.name] for p in self.space.params}
        self._asked = None if raw is None else (ident, raw)
        return Individual(id=ident, params=params, origin=Origin.CMAES,
                          parents=(NO_PARENT, NO_PARENT))

    def _new_cma(self, rng: random.Random, mean: np.ndarray,
                 size: int | None) -> LeanCMA | LeanCMAwM:
        sizes = [lattice_size(p) for p in self.numeric]
        # As in cmaes, CMA-ES runs on 2+ dimensions: one parameter gets a dummy second axis.
        if len(sizes) < 2:
            sizes += [0] * (2 - len(sizes))
        dims = len(sizes)
        start = np.clip(np.resize(mean, len(self.numeric) or 1), 0.0, 1.0)
        start = np.append(start, [0.5] * (dims - len(start)))
        seed = rng.getrandbits(31)
        steps = np.array([1.0 / m if m >= 2 else 0.0 for m in sizes])
        if not steps.any():
            return LeanCMA(mean=start, sigma=INITIAL_SIGMA,
                           bounds=np.tile([0.0, 1.0], (dims, 1)), population_size=size, seed=seed)
        # A lattice of m values: the slice centres (k + 0.5) / m, k = 0 .. m - 1.
        bounds = np.stack([steps / 2, 1.0 - steps / 2], axis=1)  # continuous: [0, 1]
        start = np.clip(start, bounds[:, 0], bounds[:, 1])
        return LeanCMAwM(mean=start, sigma=INITIAL_SIGMA, bounds=bounds, steps=steps,
                         population_size=size, seed=seed)

    def _learn(self, individuals: Sequence[Individual], rng: random.Random) -> None:
        """Tell CMA-ES every result told since the last ask, a population at a time."""
        # The loop tells each candidate's result before it asks again (a failed one is never
        # learned; one told later still is, at its values).
        asked, self._asked = self._asked, None
        for ind in self._told.take():
            if not (self.numeric and self._learns(ind)):
                continue
            raw = asked[1] if asked is not None and asked[0] == ind.id else self._point(ind)
            self._pending.append((raw, ind.loss, ind.origin != Origin.CMAES))
        assert self._cma is not None
        size = self._cma.population_size
        while len(self._pending) >= size:
            batch, self._pending = self._pending[:size], self._pending[size:]
            self._cma.tell([(clip_step(self._cma, x) if injected else x, loss)
                            for x, loss, injected in batch])
            if self._cma.should_stop():
                self._restart(individuals, rng)
                size = self._cma.population_size

    def _learns(self, ind: Individual) -> bool:
        if ind.usable:
            return True
        return self.partial and ind.status in PARTIAL and math.isfinite(ind.loss)

    def _point(self, ind: Individual) -> np.ndarray:
        point = self._unit.to_unit(ind.params)
        return np.append(point, 0.5) if len(point) == 1 else point

    def _restart(self, individuals: Sequence[Individual], rng: random.Random) -> None:
        """IPOP: twice the population, around the best point known."""
        assert self._cma is not None
        mean = self._point(individuals[0]) if individuals else np.full(len(self.numeric), 0.5)
        self.restarts += 1
        self._cma = self._new_cma(rng, mean[: len(self.numeric)],
                                  2 * self._cma.population_size)
        self._pending.clear()

    def _categoricals(self, individuals: Sequence[Individual],
                      rng: random.Random) -> dict[str, object]:
        if not self.categorical:
            return {}
        if not individuals:
            return {p.name: p.sample(rng) for p in self.categorical}
        best = individuals[0]  # ranked best first: no scan of the island's population
        rate = 1.0 / len(self.space.params)
        return {p.name: p.sample(rng) if rng.random() < rate else best.params[p.name]
                for p in self.categorical}

