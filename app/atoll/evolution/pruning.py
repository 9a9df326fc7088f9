"""Pruning: stop an evaluation whose per-epoch curve shows it will not make it.

The median rule (Optuna's MedianPruner, asynchronous): at epoch ``e``, an individual whose
reported metric is worse than the median of what completed individuals had at epoch ``e`` is
stopped, once ``warmup_epochs`` epochs have passed and at least ``min_completed`` completed
individuals reported epoch ``e``. Pure: no MPI, no files; the worker leader feeds it and asks it.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from atoll.config import PruningConfig


class MedianRule:
    """What completed individuals had at each epoch, and the verdict on a running one."""

    def __init__(self, settings: PruningConfig) -> None:
        self.settings = settings
        self._sign = -1.0 if settings.direction == "maximize" else 1.0
        self._at_epoch: dict[int, list[float]] = defaultdict(list)
        self._running: dict[int, list[tuple[int, float]]] = defaultdict(list)

    def learn_curve(self, curve: Iterable[tuple[int, float]]) -> None:
        """A completed individual's (epoch, value) pairs."""
        for epoch, value in curve:
            if value == value:  # NaN never counts
                self._at_epoch[epoch].append(self._sign * value)

    def observe(self, individual: int, epoch: int, value: float) -> bool:
        """Note a running individual's epoch; True if it should stop now (never on a metric it
        did not report: NaN)."""
        self._running[individual].append((epoch, value))
        return value == value and self.verdict(epoch, value)

    def verdict(self, epoch: int, value: float) -> bool:
        settings = self.settings
        seen = self._at_epoch.get(epoch, [])
        if epoch < settings.warmup_epochs or len(seen) < settings.min_completed:
            return False
        return self._sign * value > statistics.median(seen)

    def finish(self, individual: int, completed: bool) -> None:
        """The individual's evaluation ended; a completed (not pruned, not failed) curve
        joins the ones later individuals are compared with."""
        curve = self._running.pop(individual, [])
        if completed:
            self.learn_curve(curve)

    def completed_at(self, epoch: int) -> int:
        return len(self._at_epoch.get(epoch, []))
