"""What every Ray Tune side shares (benchmarks/.venv-ray): Ray started in a scratch folder, and
the stopper that gives a Ray search the same budget of epochs as the other side's."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ray
from ray import tune


@contextmanager
def ray_started(cpus: int, prefix: str) -> Iterator[str]:
    """Ray on ``cpus`` CPUs, its session files and the results (the folder yielded) in one
    temporary folder, all gone afterwards: Ray's default session folders stay in /tmp/ray."""
    with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False,
                 logging_level="ERROR", _temp_dir=str(Path(scratch, "ray")))
        try:
            yield str(Path(scratch, "results"))
        finally:
            ray.shutdown()


class Budget(tune.Stopper):
    """Stops the whole run once ``budget`` epochs are reported, over all trials."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.spent = 0

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        self.spent += 1
        return False

    def stop_all(self) -> bool:
        return self.spent >= self.budget
