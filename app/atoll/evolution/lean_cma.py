"""CMA-ES's continuous update, the same as ``cmaes.CMA``'s, at a fraction of its cost per call.

Each worker leader of a CMA-ES or hybrid island runs its own instance, asks it once per
evaluation and tells it once per population of the island's results, so its cost is paid per
evaluation on every rank. ``cmaes.CMA`` checks each told point in a Python loop, builds its
sampling matrix again for every sample and recomputes the same products several times per
update; at the tens of parameters of a search those small steps are most of its cost (the
strategy costs in benchmarks/RESULTS.md). This class makes the same computations once each,
on the same equations (Hansen's "The CMA Evolution Strategy: A Tutorial", 2016, with the
active update's negative weights as cmaes has them) and the same random stream (a
``RandomState``'s ``randn`` per sample, resampled until inside the bounds up to
``MAX_RESAMPLING`` times, then clipped), so its distribution after each update is
``cmaes.CMA``'s to rounding, and so are its samples while the covariance's eigenvalues are
distinct (a repeated one, as when the parameters outnumber a population early on, has no
unique eigenbasis, and numpy may return it turned: other samples of the same distribution).
Its stopping tests are cmaes's too. tests/test_lean_cma.py runs both side by side.

Integer and ordinal parameters need CMA-ES with margin: ``LeanCMAwM`` (lean_margin.py) adds it
on top of this class.
"""

from __future__ import annotations

import math

import numpy as np

EPS = 1e-8
"""The least eigenvalue kept in the covariance (cmaes's ``_EPS``)."""

SIGMA_MAX = 1e32
"""The largest step size (cmaes's ``_SIGMA_MAX``): past it, the divergence test restarts."""
MAX_EXPONENT = 700.0
"""The largest step-size growth exponent taken as it is (``math.exp`` overflows past 709)."""
MAX_RESAMPLING = 100
"""Samples drawn before an out-of-bounds one is clipped (cmaes's ``n_max_resampling``)."""


class LeanCMA:
    """An ask-and-tell CMA-ES on a box: ``ask`` one point, ``tell`` a population of them."""

    def __init__(self, mean: np.ndarray, sigma: float, bounds: np.ndarray,
                 population_size: int | None = None, seed: int | None = None) -> None:
        n = len(mean)
        if population_size is None:
            population_size = 4 + math.floor(3 * math.log(n))
        self.dim, self.population_size = n, population_size
        mu = population_size // 2
        raw = np.array([math.log((population_size + 1) / 2) - math.log(i + 1)
                        for i in range(population_size)])
        mu_eff = raw[:mu].sum() ** 2 / (raw[:mu] ** 2).sum()
        mu_eff_minus = raw[mu:].sum() ** 2 / (raw[mu:] ** 2).sum()
        c1 = 2 / ((n + 1.3) ** 2 + mu_eff)
        cmu = min(1 - c1 - 1e-8, 2 * (mu_eff - 2 + 1 / mu_eff) / ((n + 2) ** 2 + mu_eff))
        negative_scale = min(1 + c1 / cmu, 1 + 2 * mu_eff_minus / (mu_eff + 2),
                             (1 - c1 - cmu) / (n * cmu))
        positive_sum = raw[raw > 0].sum()
        negative_sum = np.abs(raw[raw < 0]).sum()
        self._weights = np.where(raw >= 0, raw / positive_sum,
                                 negative_scale / negative_sum * raw)
        self._positive = self._weights >= 0
        self._mu = mu
        self._c1, self._cmu = c1, cmu
        self._c_sigma = (mu_eff + 2) / (n + mu_eff + 5)
        self._d_sigma = 1 + 2 * max(0.0, math.sqrt((mu_eff - 1) / (n + 1)) - 1) + self._c_sigma
        self._cc = (4 + mu_eff / n) / (n + 4 + 2 * mu_eff / n)
        self._chi_n = math.sqrt(n) * (1.0 - 1.0 / (4.0 * n) + 1.0 / (21.0 * n * n))
        self._decay = 1 - c1 - cmu * self._weights.sum()  # C's weight before h_sigma's term
        self._sigma_path_scale = math.sqrt(self._c_sigma * (2 - self._c_sigma) * mu_eff)
        self._cov_path_scale = math.sqrt(self._cc * (2 - self._cc) * mu_eff)
        self._h_limit = (1.4 + 2 / (n + 1)) * self._chi_n

        self._mean = np.array(mean, dtype=float)
        self._sigma = float(sigma)
        self._C = np.eye(n)
        self._p_sigma = np.zeros(n)
        self._pc = np.zeros(n)
        self._lower, self._upper = bounds[:, 0].copy(), bounds[:, 1].copy()
        self._rng = np.random.RandomState(seed)
        self.generation = 0
        self._basis: np.ndarray | None = None
        self._scales: np.ndarray | None = None
        self._sampler: np.ndarray | None = None  # basis * scales: N(0, I) -> N(0, C)

        self._tolx = 1e-12 * sigma
        self._funhist_term = 10 + math.ceil(30 * n / population_size)
        self._funhist = np.empty(self._funhist_term * 2)

    @property
    def mean(self) -> np.ndarray:
        """The distribution's mean (the array itself: CMA-ES with margin moves it)."""
        return self._mean

    @property
    def sigma(self) -> float:
        return self._sigma

    def variances(self) -> np.ndarray:
        """The covariance's diagonal as the last update left it."""
        return np.diag(self._C).copy()

    def distribution(self) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
        """The mean, the step size and the covariance's eigenbasis and square-rooted
        eigenvalues (the axes' lengths)."""
        basis, scales = self._decomposed()
        return self._mean, self._sigma, basis, scales

    def _decomposed(self) -> tuple[np.ndarray, np.ndarray]:
        if self._basis is None or self._scales is None:
            self._C = (self._C + self._C.T) / 2
            squares, basis = np.linalg.eigh(self._C)
            scales = np.sqrt(np.where(squares < 0, EPS, squares))
            self._C = (basis * scales ** 2) @ basis.T
            self._basis, self._scales = basis, scales
            self._sampler = basis * scales
        return self._basis, self._scales

    def ask(self) -> np.ndarray:
        """One point of N(mean, sigma^2 C) inside the bounds."""
        self._decomposed()
        assert self._sampler is not None
        for _ in range(MAX_RESAMPLING + 1):
            point = self._mean + self._sigma * (self._sampler @ self._rng.randn(self.dim))
            if (point >= self._lower).all() and (point <= self._upper).all():
                return point
        return np.minimum(np.maximum(point, self._lower), self._upper)

    def tell(self, solutions: list[tuple[np.ndarray, float]]) -> None:
        """Update the distribution from ``population_size`` points and their losses."""
        if len(solutions) != self.population_size:
            raise ValueError(f"tell takes {self.population_size} solutions, "
                             f"got {len(solutions)}")
        solutions = sorted(solutions, key=lambda s: s[1])
        self.generation += 1
        slot = 2 * (self.generation % self._funhist_term)
        self._funhist[slot] = solutions[0][1]
        self._funhist[slot + 1] = solutions[-1][1]

        basis, scales = self._decomposed()
        self._basis = self._scales = self._sampler = None
        steps = (np.array([s[0] for s in solutions]) - self._mean) / self._sigma
        weighted = self._weights[: self._mu] @ steps[: self._mu]
        self._mean = self._mean + self._sigma * weighted

        whiten = (basis / scales) @ basis.T  # C^(-1/2)
        self._p_sigma = ((1 - self._c_sigma) * self._p_sigma
                         + self._sigma_path_scale * (whiten @ weighted))
        norm = float(np.sqrt(self._p_sigma @ self._p_sigma))
        # A far point learned under a collapsed step (a result bred under an older distribution)
        # makes the exponent huge: the step goes to SIGMA_MAX, whose stopping test restarts.
        growth = (self._c_sigma / self._d_sigma) * (norm / self._chi_n - 1)
        self._sigma = min(self._sigma * math.exp(min(growth, MAX_EXPONENT)), SIGMA_MAX)

        corrected = norm / math.sqrt(1 - (1 - self._c_sigma) ** (2 * (self.generation + 1)))
        h_sigma = 1.0 if corrected < self._h_limit else 0.0
        self._pc = (1 - self._cc) * self._pc + h_sigma * self._cov_path_scale * weighted

        white = steps @ whiten.T
        weights = np.where(self._positive, self._weights,
                           self._weights * self.dim / ((white * white).sum(axis=1) + EPS))
        rank_mu = (steps.T * weights) @ steps
        lost = (1 - h_sigma) * self._cc * (2 - self._cc)
        self._C = ((self._decay + self._c1 * lost) * self._C
                   + self._c1 * np.outer(self._pc, self._pc) + self._cmu * rank_mu)

    def should_stop(self) -> bool:
        """cmaes's stopping tests: the losses' range, the step, divergence, no effect along a
        coordinate or an axis, or an ill-conditioned covariance."""
        basis, scales = self._decomposed()
        variances = np.diag(self._C)
        sigma = self._sigma
        if (self.generation > self._funhist_term
                and self._funhist.max() - self._funhist.min() < 1e-12):
            return True
        if sigma * variances.max() < self._tolx and sigma * self._pc.max() < self._tolx:
            return True
        largest = scales.max()
        if sigma * largest > 1e4:
            return True
        mean = self._mean
        if (mean == mean + 0.2 * sigma * np.sqrt(variances)).any():
            return True
        axis = self.generation % self.dim
        if (mean == mean + 0.1 * sigma * scales[axis] * basis[:, axis]).all():
            return True
        return bool(largest / scales.min() > 1e14)
