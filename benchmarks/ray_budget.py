"""What every Ray Tune side shares (benchmarks/.venv-ray): the stopper that gives a Ray search
the same budget of epochs as the other side's."""

from __future__ import annotations

from typing import Any

from ray import tune


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
