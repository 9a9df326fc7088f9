"""CMA-ES with margin on LeanCMA: ``cmaes.CMAwM``'s algorithm at LeanCMA's cost per call.

Integers and ordinals are a lattice in CMA-ES's unit view. Once the step is smaller than one
lattice slice, plain CMA-ES would round every sample to the same value and freeze that
parameter; CMA-ES with margin (Hamano et al., "CMA-ES with Margin", GECCO 2022) keeps the
chance of leaving the current value above a margin by moving the mean's lattice coordinates and
stretching them (``A``) after each update. ``cmaes.CMAwM`` does this around a ``cmaes.CMA``, whose
per-call costs LeanCMA removes (lean_cma.py), and computes its normal quantiles by a bisection of
100 steps per value in Python; here the same update runs on a LeanCMA, and the quantiles come
from ``statistics.NormalDist`` (the square root of a chi-square quantile with one degree of
freedom is a normal quantile). tests/test_lean_margin.py runs both side by side.

Sampling is cmaes's: a point is drawn again while a continuous coordinate is out of bounds (the
lattice ones are rounded instead, so they go unchecked), up to ``MAX_RESAMPLING`` times, then
clipped; its lattice coordinates are stretched around the mean by ``A`` and rounded to the
nearest value (the lower one on a tie) for evaluation, and the raw point is what ``tell`` learns.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from atoll.evolution.lean_cma import LeanCMA

_NORMAL = NormalDist()
_SQRT2 = math.sqrt(2.0)
TAIL_LIMIT = 1e-10
"""The least tail probability a margin correction aims at (cmaes's clip)."""


def normal_cdf_of(x: float) -> float:
    """The standard normal distribution function."""
    return 0.5 * math.erfc(-x / _SQRT2)


def tail_quantile_of(tail: float) -> float:
    """z with P(|Z| > z) = 2 * tail: the square root of the chi-square quantile (one degree of
    freedom) of 1 - 2 * tail, computed from that probability as cmaes rounds it."""
    return -_NORMAL.inv_cdf((1.0 - (1.0 - 2.0 * tail)) / 2.0)


class LeanCMAwM:
    """An ask-and-tell CMA-ES with margin: ``ask`` a point to evaluate and the raw point to
    tell, ``tell`` a population of raw points and their losses."""

    def __init__(self, mean: np.ndarray, sigma: float, bounds: np.ndarray, steps: np.ndarray,
                 population_size: int | None = None, seed: int | None = None,
                 margin: float | None = None) -> None:
        on_lattice = steps > 0
        open_bounds = np.array(bounds, dtype=float)
        open_bounds[on_lattice] = (-np.inf, np.inf)  # rounded, never redrawn or clipped
        self.cma = LeanCMA(mean=mean, sigma=sigma, bounds=open_bounds,
                           population_size=population_size, seed=seed)
        self._indices: list[int] = np.flatnonzero(on_lattice).tolist()  # lattice coordinates
        first, step = bounds[on_lattice, 0], steps[on_lattice]
        counts = np.ceil((bounds[on_lattice, 1] + step / 2 - first) / step).astype(int)
        if (counts < 2).any():
            raise ValueError("every lattice needs at least two values")
        self.lattices: list[tuple[float, float, int]] = list(zip(
            first.tolist(), (first + step - first).tolist(),  # the step as cmaes rounds it
            counts.tolist(), strict=True))
        """Each lattice coordinate's first value, step and number of values."""
        self.margin = margin if margin is not None else 1.0 / (len(mean) * self.population_size)
        self._stretch = [1.0] * len(self._indices)  # A, on the lattice coordinates
        self._margin_quantile = tail_quantile_of(self.margin)  # where a lattice's end pushes

    @property
    def dim(self) -> int:
        return self.cma.dim

    @property
    def population_size(self) -> int:
        return self.cma.population_size

    @property
    def generation(self) -> int:
        return self.cma.generation

    @property
    def mean(self) -> np.ndarray:
        return self.cma.mean

    @property
    def stretch(self) -> np.ndarray:
        """How far each lattice coordinate of a sample is stretched around the mean."""
        return np.array(self._stretch)

    def distribution(self) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
        """LeanCMA's distribution (the margin moves its mean, not its shape)."""
        return self.cma.distribution()

    def ask(self) -> tuple[np.ndarray, np.ndarray]:
        """A point with its lattice coordinates on lattice values, and the raw point."""
        raw = self.cma.ask()
        values, mean = raw.tolist(), self.cma.mean.tolist()
        stretched = [(values[i] - mean[i]) * a + mean[i]
                     for i, a in zip(self._indices, self._stretch, strict=True)]
        for i, index, (first, step, _) in zip(self._indices, self._nearest(stretched),
                                               self.lattices, strict=True):
            values[i] = first + index * step
        return np.array(values), raw

    def tell(self, solutions: list[tuple[np.ndarray, float]]) -> None:
        """CMA-ES's update, then the margin on each lattice coordinate of the mean."""
        self.cma.tell(solutions)
        sigma, mean = self.cma.sigma, self.cma.mean
        variances = self.cma.variances()
        centres = [float(mean[i]) for i in self._indices]
        for k, (index, (below, above)) in enumerate(zip(self._indices, self._limits(centres),
                                                         strict=True)):
            mean[index], self._stretch[k] = self._with_margin(
                centres[k], self._stretch[k], sigma * math.sqrt(variances[index]), below, above)

    def _with_margin(self, centre: float, stretch: float, spread: float, below_limit: float,
                     above_limit: float) -> tuple[float, float]:
        """One lattice coordinate's mean and stretch after an update, such that a sample
        leaves the mean's lattice slice (``below_limit`` to ``above_limit``) with probability at
        least ``margin`` on each side: within a lattice the slice is re-centred and the stretch
        set to make both tails right; at a lattice's end (more than half the mass beyond one
        limit) the mean is pushed to where the inner tail is ``margin``. ``spread``: sigma
        times the coordinate's standard deviation in the covariance."""
        margin = self.margin
        scale = spread * stretch
        if not scale > 0.0:  # a step collapsed to 0: nothing to correct (a restart follows)
            return centre, stretch
        below = normal_cdf_of((below_limit - centre) / scale)
        above = 1.0 - normal_cdf_of((above_limit - centre) / scale)
        if max(below, above) > 0.5:
            if min(below, above) < margin:
                sign = (centre > above_limit) - (centre < above_limit)
                target = above_limit + sign * stretch * spread * self._margin_quantile
                centre = centre + (target - centre)  # cmaes's arithmetic, to the last bit
            return centre, stretch
        inside = 1.0 - (below + above)
        below, above = max(below, margin / 2), max(above, margin / 2)
        excess = 1.0 - below - above - inside
        total = below + inside + above - 1.5 * margin
        low = min(max(below + excess * (below - margin / 2) / total, TAIL_LIMIT),
                  0.5 - TAIL_LIMIT)
        high = min(max(above + excess * (above - margin / 2) / total, TAIL_LIMIT),
                   0.5 - TAIL_LIMIT)
        z_below, z_above = tail_quantile_of(low), tail_quantile_of(high)
        # Moved as cmaes moves them (x + (new - x)), so both round alike and runs stay together.
        stretch = stretch + ((above_limit - below_limit) / ((z_below + z_above) * spread)
                             - stretch)
        centre = centre + ((below_limit * z_above + above_limit * z_below)
                           / (z_below + z_above) - centre)
        return centre, stretch

    def should_stop(self) -> bool:
        return self.cma.should_stop()

    def _nearest(self, coordinates: list[float]) -> list[int]:
        """The index of each coordinate's nearest lattice value, the lower one on a tie (NaN:
        the first). Plain floats: a search has a lattice coordinate or a few."""
        found = []
        for c, (first, step, count) in zip(coordinates, self.lattices, strict=True):
            position = (c - first) / step + 0.5
            if not position > 0:  # below the lattice, or NaN
                i = 0
            elif position >= count:  # above it, or infinite
                i = count - 1
            else:
                i = math.floor(position)
            if i > 0 and c <= _midpoint(first, step, i - 1):
                i -= 1
            if i < count - 1 and c > _midpoint(first, step, min(i, count - 2)):
                i += 1
            found.append(i)
        return found

    def _limits(self, centres: list[float]) -> list[tuple[float, float]]:
        """The lattice slice around each coordinate of ``centres``: the midpoints below and
        above its nearest value (at a lattice's end, those of its neighbour slice)."""
        return [(_midpoint(first, step, min(max(i - 1, 0), count - 2)),
                 _midpoint(first, step, min(i, count - 2)))
                for i, (first, step, count) in zip(self._nearest(centres), self.lattices,
                                                   strict=True)]


def _midpoint(first: float, step: float, index: int) -> float:
    """Halfway between a lattice's value ``index`` and the next one."""
    return ((first + index * step) + (first + (index + 1) * step)) / 2
