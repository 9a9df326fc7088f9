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


def normal_cdf(x: np.ndarray) -> np.ndarray:
    """The standard normal distribution function, elementwise."""
    return np.array([0.5 * math.erfc(-v / _SQRT2) for v in x.tolist()])


def tail_quantile(tail: np.ndarray) -> np.ndarray:
    """z with P(|Z| > z) = 2 * tail: the square root of the chi-square quantile (one degree of
    freedom) of 1 - 2 * tail, computed from that probability as cmaes rounds it."""
    inside = 1.0 - 2.0 * tail
    return np.array([-_NORMAL.inv_cdf((1.0 - q) / 2.0) for q in inside.tolist()])


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
        self._lattice = np.flatnonzero(on_lattice)
        first, step = bounds[on_lattice, 0], steps[on_lattice]
        counts = np.ceil((bounds[on_lattice, 1] + step / 2 - first) / step).astype(int)
        if (counts < 2).any():
            raise ValueError("every lattice needs at least two values")
        self.lattices: list[tuple[float, float, int]] = list(zip(
            first.tolist(), (first + step - first).tolist(),  # the step as cmaes rounds it
            counts.tolist(), strict=True))
        """Each lattice coordinate's first value, step and number of values."""
        self.margin = margin if margin is not None else 1.0 / (len(mean) * self.population_size)
        self._stretch = np.ones(len(self._lattice))  # A, on the lattice coordinates

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
        return self._stretch

    def ask(self) -> tuple[np.ndarray, np.ndarray]:
        """A point with its lattice coordinates on lattice values, and the raw point."""
        raw = self.cma.ask()
        point = raw.copy()
        centre = self.cma.mean[self._lattice]
        stretched = (raw[self._lattice] - centre) * self._stretch + centre
        point[self._lattice] = self._value(self._nearest(stretched))
        return point, raw

    def tell(self, solutions: list[tuple[np.ndarray, float]]) -> None:
        """CMA-ES's update, then the margin: each lattice coordinate of the mean and its
        stretch set so that a sample leaves the mean's value with probability at least
        ``margin`` on each side."""
        self.cma.tell(solutions)
        sigma, margin = self.cma.sigma, self.margin
        centre = self.cma.mean[self._lattice]
        variances = self.cma.variances()[self._lattice]
        below_limit, above_limit = self._limits(centre)
        scale = sigma * self._stretch * np.sqrt(variances)
        below = normal_cdf((below_limit - centre) / scale)
        above = 1.0 - normal_cdf((above_limit - centre) / scale)
        inside = 1.0 - (below + above)
        edge = np.maximum(below, above) > 0.5  # the mean's value is a lattice's end
        side = np.maximum(below, above) <= 0.5
        moved = centre.copy()
        if edge.any():
            push = edge & (np.minimum(below, above) < margin)
            sign = np.sign(centre - above_limit)
            chi2 = tail_quantile(np.array([margin]))[0] ** 2
            distance = sigma * self._stretch * np.sqrt(chi2 * variances)
            moved = moved + push * (above_limit + sign * distance - moved)
        below = np.maximum(below, margin / 2)
        above = np.maximum(above, margin / 2)
        excess = 1.0 - below - above - inside
        total = below + inside + above - 1.5 * margin
        below = np.clip(below + excess * (below - margin / 2) / total,
                        TAIL_LIMIT, 0.5 - TAIL_LIMIT)
        above = np.clip(above + excess * (above - margin / 2) / total,
                        TAIL_LIMIT, 0.5 - TAIL_LIMIT)
        z_below, z_above = tail_quantile(below), tail_quantile(above)
        self._stretch = self._stretch + side * (
            (above_limit - below_limit) / ((z_below + z_above) * sigma * np.sqrt(variances))
            - self._stretch)
        moved = moved + side * ((below_limit * z_above + above_limit * z_below)
                                / (z_below + z_above) - moved)
        self.cma.mean[self._lattice] = moved

    def should_stop(self) -> bool:
        return self.cma.should_stop()

    def _value(self, index: list[int]) -> np.ndarray:
        return np.array([first + i * step
                         for (first, step, _), i in zip(self.lattices, index, strict=True)])

    def _nearest(self, coordinates: np.ndarray) -> list[int]:
        """The index of each coordinate's nearest lattice value, the lower one on a tie (NaN:
        the first). Plain floats: a search has a lattice coordinate or a few."""
        found = []
        for c, (first, step, count) in zip(coordinates.tolist(), self.lattices, strict=True):
            position = (c - first) / step + 0.5
            if not position > 0:  # below the lattice, or NaN
                i = 0
            else:
                i = min(math.floor(position), count - 1)
            if i > 0 and c <= _midpoint(first, step, i - 1):
                i -= 1
            if i < count - 1 and c > _midpoint(first, step, min(i, count - 2)):
                i += 1
            found.append(i)
        return found

    def _limits(self, centre: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The lattice slice around each coordinate of ``centre``: the midpoints below and
        above its nearest value (at a lattice's end, those of its neighbour slice)."""
        below, above = [], []
        for i, (first, step, count) in zip(self._nearest(centre), self.lattices, strict=True):
            below.append(_midpoint(first, step, min(max(i - 1, 0), count - 2)))
            above.append(_midpoint(first, step, min(i, count - 2)))
        return np.array(below), np.array(above)


def _midpoint(first: float, step: float, index: int) -> float:
    """Halfway between a lattice's value ``index`` and the next one."""
    return ((first + index * step) + (first + (index + 1) * step)) / 2
