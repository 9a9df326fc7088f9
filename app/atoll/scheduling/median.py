"""The median rule (Optuna's MedianPruner, asynchronous).

At epoch ``e``, an evaluation whose reported metric is worse than the median of what completed
evaluations of the island had at epoch ``e`` is stopped, once ``warmup_epochs`` epochs have
passed and at least ``min_completed`` completed evaluations reported epoch ``e``.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import TYPE_CHECKING

from atoll.scheduling.base import Curve, Verdict

if TYPE_CHECKING:
    from atoll.config import PruningConfig


class MedianRule:
    """What completed evaluations had at each epoch, and the verdict on a running one."""

    def __init__(self, settings: PruningConfig) -> None:
        self.settings = settings
        self._sign = -1.0 if settings.direction == "maximize" else 1.0
        self._at_epoch: dict[int, list[float]] = defaultdict(list)  # sorted: the median is
        # read, not computed, so a report costs the same however many curves the island has
        self._running: dict[int, list[tuple[int, float]]] = defaultdict(list)

    def learn(self, curve: Curve) -> None:
        for epoch, value in curve:
            if value == value:  # NaN never counts
                bisect.insort(self._at_epoch[epoch], self._sign * value)

    def on_report(self, individual: int, epoch: int, value: float) -> Verdict:
        """Never stops on a metric that was not reported (NaN)."""
        self._running[individual].append((epoch, value))
        stop = value == value and self.worse_than_median(epoch, value)
        return Verdict.STOP if stop else Verdict.CONTINUE

    def worse_than_median(self, epoch: int, value: float) -> bool:
        settings = self.settings
        seen = self._at_epoch.get(epoch, [])
        if epoch < settings.warmup_epochs or len(seen) < settings.min_completed:
            return False
        middle = len(seen) // 2
        median = seen[middle] if len(seen) % 2 else (seen[middle - 1] + seen[middle]) / 2
        return self._sign * value > median

    def on_complete(self, individual: int, completed: bool) -> None:
        """A completed (not pruned, not failed) curve joins the references."""
        curve = self._running.pop(individual, [])
        if completed:
            self.learn(curve)

    def completed_at(self, epoch: int) -> int:
        return len(self._at_epoch.get(epoch, []))
