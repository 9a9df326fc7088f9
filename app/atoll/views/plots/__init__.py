"""The report's PNG plots, drawn with matplotlib's Agg canvas.

Imported only when plots are asked for, so the rest of the report works without matplotlib.
Each drawer returns a :class:`Plot` or, when the run's data does not allow it, a one-line note
saying why it was skipped; None when the run has nothing of the kind to show (no note).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from atoll.record.reader import RunData
from atoll.views.plots.common import Plot
from atoll.views.plots.curves import intermediate_values
from atoll.views.plots.importance import parameter_importance
from atoll.views.plots.lineage import lineage
from atoll.views.plots.parameters import loss_by_parameter, parallel_coordinates
from atoll.views.plots.progress import best_loss, epoch_curves
from atoll.views.plots.timeline import timeline

Drawer = Callable[[RunData, Path, int], "Plot | str | None"]
DRAWERS: tuple[Drawer, ...] = (best_loss, epoch_curves, intermediate_values, parameter_importance,
                               loss_by_parameter, parallel_coordinates, timeline, lineage)

__all__ = ["DRAWERS", "Plot", "draw_all"]


def draw_all(run: RunData, out: Path, top: int) -> tuple[list[Plot], list[str]]:
    """Every plot the run's data allows, and a note for each one skipped."""
    plots: list[Plot] = []
    skipped: list[str] = []
    for draw in DRAWERS:
        result = draw(run, out, top)
        if isinstance(result, Plot):
            plots.append(result)
        elif result is not None:
            skipped.append(result)
    return plots, skipped
