"""The island loop's own random draws: the breeding stream and the gaps between emigrations."""

from __future__ import annotations

import statistics

import pytest

from atoll.island import breeding_rng, geometric


def test_breeding_rng_is_fixed_by_seed_job_and_worker() -> None:
    draws = [breeding_rng(7, 0, 1).random() for _ in range(2)]
    assert draws[0] == draws[1]
    others = {breeding_rng(*key).random() for key in [(7, 0, 1), (8, 0, 1), (7, 1, 1), (7, 0, 2)]}
    assert len(others) == 4


@pytest.mark.parametrize("p", [0.05, 0.3, 0.9])
def test_geometric_gap_has_the_mean_and_first_step_of_bernoulli_trials(p: float) -> None:
    rng = breeding_rng(1, 0, 0)
    gaps = [geometric(rng, p) for _ in range(20000)]
    assert min(gaps) == 1 and all(isinstance(g, int) for g in gaps)
    assert statistics.fmean(gaps) == pytest.approx(1 / p, rel=0.05)
    assert gaps.count(1) / len(gaps) == pytest.approx(p, abs=0.015)


def test_geometric_gap_with_certain_success_is_one() -> None:
    rng = breeding_rng(1, 0, 0)
    assert {geometric(rng, 1.0) for _ in range(100)} == {1}
