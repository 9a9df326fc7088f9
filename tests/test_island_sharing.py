"""Budget sharing in a real job (mpirun, one rank per worker): a worker whose evaluations are
quick takes over part of a slow partner's share instead of sitting idle until it is done."""

from __future__ import annotations

import numpy as np
import pytest

from atoll.engine.restore import completed_count
from atoll.record import open_run
from conftest import mpirun_atoll

CONFIG = "tests/configs/slow_sphere.toml"


def test_quick_workers_take_over_a_slow_partners_share_and_the_budget_stays_exact(tmp_path):
    run_dir = tmp_path / "run"
    done = mpirun_atoll(4, "search", "--config", CONFIG, "--run-dir", str(run_dir),
                        "--set", "search.evaluations=8", "--set", "search.islands=1",
                        "--set", "objective.name=objectives:uneven",
                        "--set", "objective.options.slow=1.5",
                        "--set", "objective.options.fast=0.02")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = open_run(run_dir).individuals
    assert completed_count(rows) == 8 and len(np.unique(rows["id"])) == 8
    per_worker = np.bincount(rows["worker"], minlength=4).tolist()
    # An even split is 2 each. The quick workers spent theirs and asked while the slow one
    # (rank 0) ran its first evaluation; right after it, it gave its second away.
    assert per_worker[0] == 1, per_worker


@pytest.mark.parametrize("poll", [False, True])
def test_a_worker_answers_an_ask_at_its_next_report_not_at_the_end_of_its_evaluation(tmp_path,
                                                                                      poll):
    """At its next ctx.report, or its next ctx.stop_requested (poll)."""
    run_dir = tmp_path / "run"
    done = mpirun_atoll(2, "search", "--config", CONFIG, "--run-dir", str(run_dir),
                        "--set", "search.evaluations=4", "--set", "search.islands=1",
                        "--set", "objective.name=objectives:uneven",
                        "--set", "objective.options.slow=4",
                        "--set", "objective.options.fast=0.02",
                        "--set", "objective.options.epochs=40",
                        "--set", f"objective.options.poll={str(poll).lower()}")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = open_run(run_dir).individuals
    assert completed_count(rows) == 4 and len(np.unique(rows["id"])) == 4
    slow, quick = rows[rows["worker"] == 0], rows[rows["worker"] == 1]
    # The slow worker (rank 0) began one evaluation of its two; the quick one spent its own two
    # and asked. Answered at the slow one's next report (every 0.1 s), it had the third begun
    # long before the slow evaluation ended (4 s), where an answer between evaluations would
    # have come only then.
    assert len(slow) == 1 and len(quick) == 3, rows["worker"].tolist()
    assert quick["started"].max() < slow["finished"][0] - 2.0
