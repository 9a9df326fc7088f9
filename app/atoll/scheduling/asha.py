"""Successive halving, the promotion form (ASHA as published, Li et al.).

The rungs and the best ``1/eta`` are :class:`~atoll.scheduling.halving.SuccessiveHalving`'s. An
evaluation that reaches a rung outside the best ``1/eta`` pauses instead of stopping: it ends
with its checkpoint kept. As the island records more values at that rung, the threshold moves,
and a paused individual that is now among the best ``1/eta`` may be promoted: continued from its
checkpoint, under its id, to the next rung. :meth:`Asha.promotable` says which ones qualify; the
island's strategy (:class:`atoll.evolution.strategy.PromoteFirst`) promotes them before it
breeds.

Every value an individual reports at a rung counts, whatever became of it, so the rungs' values
come from this worker's reports and from every curve its island partners share.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from atoll.scheduling.base import Curve, Verdict
from atoll.scheduling.halving import SuccessiveHalving

if TYPE_CHECKING:
    from atoll.config import PruningConfig


class Asha(SuccessiveHalving):
    """The rungs' values, and the last rung each individual reached (where a paused one
    waits)."""

    def __init__(self, settings: PruningConfig) -> None:
        super().__init__(settings)
        self._last_rung: dict[int, tuple[int, float]] = {}  # id -> (epoch, key)

    def on_report(self, individual: int, epoch: int, value: float) -> Verdict:
        """Pause, never stop; never on a metric that was not reported (NaN)."""
        if value != value or not self.is_rung(epoch):
            return Verdict.CONTINUE
        key = self._record(epoch, value)
        self._last_rung[individual] = (epoch, key)
        return Verdict.CONTINUE if self.kept(epoch, key) else Verdict.PAUSE

    def learn_of(self, individual: int, curve: Curve) -> None:
        """Part of ``individual``'s curve from elsewhere on the island (a partner, the
        record). Parts may arrive out of order (from different partners): its last rung is the
        highest one heard."""
        for epoch, value in curve:
            if value == value and self.is_rung(epoch):
                key = self._record(epoch, value)
                if epoch >= self._last_rung.get(individual, (epoch, key))[0]:
                    self._last_rung[individual] = (epoch, key)

    def on_complete(self, individual: int, completed: bool) -> None:
        """A completed individual waits at no rung."""
        if completed:
            self._last_rung.pop(individual, None)

    def promotable(self, paused: Iterable[int]) -> list[tuple[int, int]]:
        """(id, epoch of its rung) of the ``paused`` individuals that are among the best
        ``1/eta`` at their rung now: the highest rung first (ASHA's order), the best first
        within a rung. One whose rung value has not arrived yet is left for later."""
        found = []
        for ident in paused:
            where = self._last_rung.get(ident)
            if where is not None and self.kept(*where):
                found.append((-where[0], where[1], ident))
        return [(ident, -rung) for rung, _, ident in sorted(found)]
