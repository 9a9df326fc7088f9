"""Successive halving, the stopping form (Optuna's SuccessiveHalvingPruner, Ray Tune's ASHA
without promotion).

Rungs lie after ``min_epochs * eta**k`` epochs (k = 0, 1, ...). An evaluation that reaches a rung
goes on only if its metric there is among the best ``1/eta`` of the values the island recorded
at that rung (at least the best one): while fewer than ``eta`` values are known there, only
the best so far goes on, as in Optuna's SuccessiveHalvingPruner (so the first evaluations of a
few workers do not all train whole). Every value reported at a rung counts, whatever became of
its evaluation: this worker's, and its island partners' as they report them.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import TYPE_CHECKING

from atoll.scheduling.base import Curve, Verdict

if TYPE_CHECKING:
    from atoll.config import PruningConfig


def is_rung(epoch: int, min_epochs: int, eta: int, max_epochs: int = 0) -> bool:
    """Whether reporting ``epoch`` (counted from 0) completes a rung's number of epochs. The
    objective's last epoch (``max_epochs``, if known) is no rung: nothing is left to decide."""
    trained = epoch + 1
    if trained < min_epochs or trained % min_epochs or 0 < max_epochs <= trained:
        return False
    factor = trained // min_epochs
    while factor % eta == 0:
        factor //= eta
    return factor == 1


def rungs_below(min_epochs: int, eta: int, max_epochs: int) -> int:
    """How many rungs an evaluation that trains all ``max_epochs`` (> 0) passes."""
    count, trained = 0, min_epochs
    while trained < max_epochs:
        count, trained = count + 1, trained * eta
    return count


class SuccessiveHalving:
    """The sorted values at each rung, and the verdict on an evaluation reaching one."""

    def __init__(self, settings: PruningConfig) -> None:
        self.min_epochs, self.eta = settings.min_epochs, settings.eta
        self.max_epochs = settings.max_epochs
        self._sign = -1.0 if settings.direction == "maximize" else 1.0
        self._at_rung: dict[int, list[float]] = defaultdict(list)  # sorted, best first

    def _record(self, epoch: int, value: float) -> float:
        key = self._sign * value
        bisect.insort(self._at_rung[epoch], key)
        return key

    def is_rung(self, epoch: int) -> bool:
        return is_rung(epoch, self.min_epochs, self.eta, self.max_epochs)

    def learn(self, curve: Curve) -> None:
        for epoch, value in curve:
            if value == value and self.is_rung(epoch):
                self._record(epoch, value)

    def on_report(self, individual: int, epoch: int, value: float) -> Verdict:
        """Never stops on a metric that was not reported (NaN)."""
        if value != value or not self.is_rung(epoch):
            return Verdict.CONTINUE
        key = self._record(epoch, value)
        return Verdict.CONTINUE if self.kept(epoch, key) else Verdict.STOP

    def kept(self, epoch: int, key: float) -> bool:
        """Whether ``key`` (a value, negated when maximizing) is among the best ``1/eta`` of
        those recorded at the rung after ``epoch``, and at least the best one."""
        known = self._at_rung[epoch]
        return key <= known[max(len(known) // self.eta, 1) - 1]  # the worst value still kept

    def on_complete(self, individual: int, completed: bool) -> None:
        """Its values were recorded as they were reported."""
