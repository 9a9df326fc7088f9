"""A ``pruning.metric`` the objective never reports prunes nothing: say so once per worker.

The median rule treats a missing metric as "not judged", so a misspelt name (``val_acc``
against ``val_accuracy``) would otherwise turn pruning off without a word.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

log = logging.getLogger(__name__)


class MetricCheck:
    """Collects the metric names one evaluation reports; warns once when a completed
    evaluation reported epochs but never ``metric``."""

    def __init__(self, metric: str) -> None:
        self.metric = metric
        self._seen: set[str] = set()
        self._warned = False

    def saw(self, names: Iterable[str]) -> None:
        """One ``ctx.report``'s metric names."""
        self._seen.update(names)

    def evaluation_ended(self, individual_id: int, completed: bool) -> None:
        """Judge the evaluation that just ended (a failed one may have stopped before its
        first report of the metric), then start afresh for the next."""
        seen, self._seen = self._seen, set()
        if self._warned or not completed or not seen or self.metric in seen:
            return
        self._warned = True
        log.warning("pruning.metric = %r was never reported (individual %d reported %s): "
                    "pruning stops nothing; set pruning.metric to a metric ctx.report gets",
                    self.metric, individual_id, ", ".join(sorted(seen)))
