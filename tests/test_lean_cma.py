"""LeanCMA against cmaes.CMA, side by side: the same seed, the same points told, the same
distribution after every update, the same stopping decisions."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from cmaes import CMA

from atoll.evolution.lean_cma import LeanCMA


def _pair(dims: int, seed: int, size: int | None = None,
          mean: float = 0.5, sigma: float = 1 / 6) -> tuple[CMA, LeanCMA]:
    bounds = np.tile([0.0, 1.0], (dims, 1))
    start = np.full(dims, mean)
    return (CMA(mean=start, sigma=sigma, bounds=bounds, population_size=size, seed=seed),
            LeanCMA(mean=start, sigma=sigma, bounds=bounds, population_size=size, seed=seed))


def _same_distribution(theirs: CMA, ours: LeanCMA) -> None:
    mean, sigma, basis, scales = ours.distribution()
    their_basis, their_scales = theirs._eigen_decomposition()
    np.testing.assert_allclose(mean, theirs.mean, rtol=1e-9, atol=1e-12)
    assert sigma == pytest.approx(theirs._sigma, rel=1e-9)
    np.testing.assert_allclose((basis * scales ** 2) @ basis.T,
                               (their_basis * their_scales ** 2) @ their_basis.T,
                               rtol=1e-8, atol=1e-12)


def _ellipsoid(point: np.ndarray) -> float:
    return float(((point - 0.3) ** 2 * np.arange(1, len(point) + 1)).sum())


@pytest.mark.parametrize(("dims", "seed", "size"), [(2, 1, None), (10, 7, None), (5, 3, 24)])
def test_it_asks_and_learns_as_cmaes_does(dims: int, seed: int, size: int | None) -> None:
    theirs, ours = _pair(dims, seed, size)
    assert ours.population_size == theirs.population_size
    for _ in range(40):
        asked = [(theirs.ask(), ours.ask()) for _ in range(theirs.population_size)]
        for their_point, our_point in asked:
            np.testing.assert_allclose(our_point, their_point, rtol=1e-9, atol=1e-12)
        theirs.tell([(p, _ellipsoid(p)) for p, _ in asked])
        ours.tell([(p, _ellipsoid(p)) for _, p in asked])
        assert ours.generation == theirs.generation
        _same_distribution(theirs, ours)
        assert ours.should_stop() == theirs.should_stop()


@pytest.mark.parametrize("dims", [30, 60])
def test_with_more_parameters_than_a_population_the_distributions_stay_the_same(
        dims: int) -> None:
    """Early on, the covariance has repeated eigenvalues, whose eigenbasis numpy may return
    turned: the samples then differ, not their distribution. Fed the same points, the two keep
    the same mean, step and covariance."""
    theirs, ours = _pair(dims, 3)
    for _ in range(40):
        points = [theirs.ask() for _ in range(theirs.population_size)]
        theirs.tell([(p, _ellipsoid(p)) for p in points])
        ours.tell([(p, _ellipsoid(p)) for p in points])
        _same_distribution(theirs, ours)
        assert ours.should_stop() == theirs.should_stop()


def random_batches(dims: int, size: int, generations: int = 15) -> Iterator[list[np.ndarray]]:
    """Points neither CMA-ES sampled (injected ones): uniform in the unit cube, ``size`` at a
    time."""
    other = np.random.default_rng(5)
    for _ in range(generations):
        yield [other.uniform(0.0, 1.0, dims) for _ in range(size)]


def test_points_it_did_not_sample_are_learned_the_same() -> None:
    """Injected results (the GA's children, immigrants) move both alike."""
    theirs, ours = _pair(6, 11)
    for points in random_batches(6, ours.population_size):
        theirs.tell([(p, _ellipsoid(p)) for p in points])
        ours.tell([(p, _ellipsoid(p)) for p in points])
        _same_distribution(theirs, ours)


def test_out_of_bounds_samples_are_drawn_again_or_clipped_alike() -> None:
    """A mean on the bound and a wide step: most samples fall outside and are redrawn."""
    theirs, ours = _pair(4, 2, mean=1.0, sigma=3.0)
    for _ in range(30):
        ours_point, their_point = ours.ask(), theirs.ask()
        np.testing.assert_array_equal(ours_point, their_point)
        assert ((0.0 <= ours_point) & (ours_point <= 1.0)).all()


def test_it_stops_when_cmaes_stops() -> None:
    """A flat loss: the range of the recent losses collapses and both stop at one generation."""
    theirs, ours = _pair(3, 4)
    for _ in range(200):
        asked = [(theirs.ask(), ours.ask()) for _ in range(ours.population_size)]
        theirs.tell([(p, 1.0) for p, _ in asked])
        ours.tell([(p, 1.0) for _, p in asked])
        stops = ours.should_stop()
        assert stops == theirs.should_stop()
        if stops:
            break
    assert stops and ours.generation == theirs.generation > 1


def test_far_points_under_a_collapsed_step_send_it_to_its_cap_and_stop_it() -> None:
    """Results bred under an older, wider distribution, learned after the step collapsed: the
    step-size's growth overflows a float; it goes to its cap, as cmaes's does, and stops."""
    theirs, ours = _pair(4, 9, sigma=1e-12)
    far = [np.full(4, 0.9) - 0.01 * i for i in range(ours.population_size)]
    with np.errstate(over="ignore"):  # cmaes's np.exp overflows to inf, then takes the cap
        theirs.tell([(p, float(i)) for i, p in enumerate(far)])
    ours.tell([(p, float(i)) for i, p in enumerate(far)])
    assert ours.distribution()[1] == theirs._sigma == 1e32
    assert ours.should_stop() and theirs.should_stop()


def test_a_population_of_the_wrong_size_is_refused() -> None:
    _, ours = _pair(3, 1)
    with pytest.raises(ValueError, match="tell takes"):
        ours.tell([(ours.ask(), 0.0)])
