"""LeanCMAwM against cmaes.CMAwM, side by side: the same seed, the same points told, the same
samples, distribution, stretch and stopping decisions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cmaes import CMAwM
from cmaes._stats import chi2_ppf, norm_cdf

from atoll.evolution.lean_margin import LeanCMAwM, _midpoint, normal_cdf_of, tail_quantile_of
from test_lean_cma import _ellipsoid, random_batches


def _pair(sizes: list[int], seed: int, size: int | None = None,
          sigma: float = 1 / 6) -> tuple[CMAwM, LeanCMAwM]:
    """A lattice of m values per coordinate (0: continuous), as CMAES builds them."""
    steps = np.array([1.0 / m if m else 0.0 for m in sizes])
    bounds = np.stack([np.where(steps > 0, steps / 2, 0.0),
                       np.where(steps > 0, 1.0 - steps / 2, 1.0)], axis=1)
    start = np.clip(np.full(len(sizes), 0.5), bounds[:, 0], bounds[:, 1])
    return (CMAwM(mean=start.copy(), sigma=sigma, bounds=bounds, steps=steps,
                  population_size=size, seed=seed),
            LeanCMAwM(mean=start.copy(), sigma=sigma, bounds=bounds, steps=steps,
                      population_size=size, seed=seed))


def _same_state(theirs: CMAwM, ours: LeanCMAwM) -> None:
    inner = theirs._cma
    np.testing.assert_allclose(ours.mean, inner.mean, rtol=1e-9, atol=1e-12)
    assert ours.cma.sigma == pytest.approx(inner._sigma, rel=1e-9)
    np.testing.assert_allclose(ours.stretch, theirs._A[theirs._discrete_idx], rtol=1e-9)
    np.testing.assert_allclose(ours.cma.variances(), np.diag(inner._C), rtol=1e-8, atol=1e-12)


CASES = [([0, 0, 3, 0, 5, 2], 3, None), ([2, 2, 2, 2], 1, None), ([0, 10, 0, 4, 0], 7, 16)]


@pytest.mark.parametrize(("sizes", "seed", "size"), CASES)
def test_it_asks_and_learns_as_cmaes_does(sizes: list[int], seed: int,
                                          size: int | None) -> None:
    theirs, ours = _pair(sizes, seed, size)
    assert ours.population_size == theirs.population_size
    assert ours.margin == pytest.approx(theirs.margin)
    pushed = 0
    for _ in range(40):
        asked = [(theirs.ask(), ours.ask()) for _ in range(theirs.population_size)]
        for (their_point, their_raw), (our_point, our_raw) in asked:
            np.testing.assert_allclose(our_raw, their_raw, rtol=1e-9, atol=1e-12)
            np.testing.assert_array_equal(our_point[ours._indices],
                                          their_point[ours._indices])
            np.testing.assert_allclose(our_point, their_point, rtol=1e-9, atol=1e-12)
        before = ours.stretch.copy()
        theirs.tell([(raw, _ellipsoid(point)) for (point, raw), _ in asked])
        ours.tell([(raw, _ellipsoid(point)) for _, (point, raw) in asked])
        pushed += int((ours.stretch == before).any())  # a lattice end: the mean pushed instead
        _same_state(theirs, ours)
        assert ours.should_stop() == theirs.should_stop()
    # The loss is smallest at 0.3 everywhere: a binary coordinate wants its lower end (0.25).
    assert pushed, "no lattice coordinate reached an end: the edge correction went untested"


def test_points_it_did_not_sample_are_learned_the_same() -> None:
    """Injected results (the GA's children, immigrants) move both alike."""
    theirs, ours = _pair([0, 3, 0, 6], 11)
    for points in random_batches(4, ours.population_size):
        theirs.tell([(p, _ellipsoid(p)) for p in points])
        ours.tell([(p, _ellipsoid(p)) for p in points])
        _same_state(theirs, ours)


def test_a_flat_loss_stops_both_at_the_same_generation() -> None:
    theirs, ours = _pair([0, 4, 0], 2)
    for generation in range(1, 200):
        asked = [(theirs.ask(), ours.ask()) for _ in range(theirs.population_size)]
        theirs.tell([(raw, 1.0) for (_, raw), _ in asked])
        ours.tell([(raw, 1.0) for _, (_, raw) in asked])
        assert ours.should_stop() == theirs.should_stop(), generation
        if ours.should_stop():
            break
    assert ours.should_stop(), "a flat loss never stopped either"


def test_its_normal_functions_are_cmaes_s_own_to_rounding() -> None:
    tails = np.concatenate([np.logspace(-10, -1, 50), np.linspace(0.1, 0.5 - 1e-10, 50)])
    np.testing.assert_allclose([tail_quantile_of(t) for t in tails],
                               np.sqrt(chi2_ppf(q=1.0 - 2.0 * tails)), rtol=1e-9)
    x = np.linspace(-12.0, 12.0, 241)
    np.testing.assert_allclose([normal_cdf_of(v) for v in x], norm_cdf(x), rtol=1e-12,
                               atol=1e-300)


def test_a_lattice_of_one_value_is_refused() -> None:
    with pytest.raises(ValueError, match="at least two values"):
        LeanCMAwM(mean=np.array([0.5, 0.5]), sigma=0.2, bounds=np.array([[0.5, 0.5], [0.0, 1.0]]),
                  steps=np.array([1.0, 0.0]))


def test_coordinates_round_to_the_same_lattice_values_ties_to_the_lower() -> None:
    theirs, ours = _pair([0, 3, 4, 2], 1)
    lattice = ours._indices
    midpoints = [np.array([_midpoint(first, step, k) for first, step, _ in ours.lattices])
                 for k in range(2)]
    grid = [np.full(len(lattice), u) for u in np.linspace(-0.2, 1.2, 57)] + midpoints
    for coordinates in grid:
        assert np.array_equal(ours._nearest(coordinates.tolist()),
                              theirs._get_discrete_param_indices(coordinates))
    assert ours._nearest(midpoints[0].tolist()) == [0] * len(lattice)  # halfway between 0 and 1: 0


def test_off_lattice_coordinates_round_to_its_ends_and_a_zero_step_changes_nothing() -> None:
    _, ours = _pair([0, 3, 4], 1)
    assert ours._nearest([math.inf, -math.inf]) == [2, 0]
    assert ours._nearest([math.nan, 1e300]) == [0, 3]
    assert ours._with_margin(0.5, 1.0, 0.0, 1 / 3, 2 / 3) == (0.5, 1.0)
