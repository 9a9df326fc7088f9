"""Budget sharing in a real job (mpirun, one rank per worker): a worker whose evaluations are
quick takes over part of a slow partner's share instead of sitting idle until it is done."""

from __future__ import annotations

import numpy as np

from atoll.engine.restore import completed_count
from atoll.record import open_run
from conftest import mpirun_atoll

CONFIG = "tests/configs/slow_sphere.toml"


def test_quick_workers_take_over_a_slow_partners_share_and_the_budget_stays_exact(tmp_path):
    run_dir = tmp_path / "run"
    done = mpirun_atoll(3, "search", "--config", CONFIG, "--run-dir", str(run_dir),
                        "--set", "search.evaluations=12", "--set", "search.islands=1",
                        "--set", "objective.name=objectives:uneven",
                        "--set", "objective.options.slow=1.0",
                        "--set", "objective.options.fast=0.02")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = open_run(run_dir).individuals
    assert completed_count(rows) == 12 and len(np.unique(rows["id"])) == 12
    per_worker = np.bincount(rows["worker"], minlength=3).tolist()
    # an even split is 4 each: the slow worker (rank 0) gave most of its share away
    assert per_worker[0] < 4 and sum(per_worker) == 12, per_worker
