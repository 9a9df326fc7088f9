"""benchmarks/fidelity.py (make bench's multi-fidelity row) kept honest between its runs: its
methods' configurations, how it reads levels and ratios off trajectories, and one real ASHA
search spending its epoch budget."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from atoll.config import load_config

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.append(str(BENCHMARKS))  # after tests/: its objectives.py is not the tests' one

import fidelity  # noqa: E402
import fidelity_ray  # noqa: E402


def test_every_method_is_a_valid_config_and_the_repeats_stay_out_by_default(tmp_path):
    config = tmp_path / "curves.toml"
    config.write_text(fidelity.CONFIG)
    for settings in fidelity.ALL.values():
        load_config(config, overrides=settings)
    assert set(fidelity.METHODS).isdisjoint(fidelity.REPEATS)
    assert fidelity_ray.ATOLL in fidelity.ALL
    assert {"full training, GA", "median rule, GA"} <= set(fidelity.METHODS)


def test_levels_span_the_reference_and_the_ratio_skips_levels_it_never_reaches(monkeypatch):
    monkeypatch.setattr(fidelity, "EPOCH_BUDGET", 100)
    monkeypatch.setattr(fidelity, "LEVELS", 3)
    theirs = [[(10, 0.4), (50, 0.1), (100, 0.01)], [(10, 0.4), (60, 0.1), (100, 0.01)]]
    at = fidelity.levels(theirs)
    assert at == pytest.approx([0.4, 0.4 * (0.01 / 0.4) ** 0.5, 0.01]) and at[-1] == 0.01
    ours = [[(20, 0.4), (30, 0.05), (40, 0.01)]] * 2
    assert fidelity.epochs_at(ours, at) == [20.0, 30.0, 40.0]
    assert fidelity.worst_ratio(ours, theirs, at) == pytest.approx(2.0)  # 20 against 10
    assert fidelity.worst_ratio(theirs, ours, at + [0.001]) == pytest.approx(100 / 30)
    assert math.isinf(fidelity.epochs_to(ours[0], 0.001))


def test_the_first_completion_is_where_the_regret_first_is_known():
    assert fidelity.first_completion([(5, math.inf), (31, math.inf), (40, 0.3), (50, 0.1)]) == 40
    assert math.isinf(fidelity.first_completion([(5, math.inf)]))
    assert math.isinf(fidelity.first_completion([]))


def test_atolls_best_is_the_lowest_worst_ratio_and_then_the_lowest_final_regret():
    finals = {"full": 0.02, "median": 0.007, "asha": 0.0047}
    assert fidelity.best_scheduler({"full": math.inf, "median": math.inf, "asha": math.inf},
                                   finals) == "asha"
    assert fidelity.best_scheduler({"full": 0.9, "median": math.nan, "asha": math.inf},
                                   finals) == "full"
    assert fidelity.best_scheduler({"full": 0.9, "median": 0.6, "asha": math.nan},
                                   finals) == "median"


@pytest.mark.slow
def test_an_asha_search_spends_its_epoch_budget(tmp_path, monkeypatch):
    """The evaluations ASHA is given are enough for the epoch budget (the row checks it too)."""
    config = tmp_path / "curves.toml"
    config.write_text(fidelity.CONFIG)
    rule = "ASHA, CMA-ES"
    path = fidelity.atoll_run(tmp_path / "run", config, 1, rule, fidelity.METHODS[rule])
    assert path[-1][0] >= fidelity.EPOCH_BUDGET
    assert path[-1][1] < 0.05  # the incumbent's regret: better than a random candidate's
