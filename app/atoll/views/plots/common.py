"""What the report's plots share: the Agg canvas, saving, loss and log axes, time units.

matplotlib's object API on an Agg canvas: no display, no pyplot state, safe in any process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from atoll.individual import Status
from atoll.record import written_whole
from atoll.record.reader import RunData
from atoll.views.facts import maximizing

DPI = 100
LOSS_LABEL = "loss (objective units, lower is better)"
VALUE_LABEL = "value (objective units, higher is better)"
STATUS_COLOURS = {Status.OK: "#4c72b0", Status.FAILED: "#d62728", Status.PRUNED: "#ff7f0e",
                  Status.INTERRUPTED: "#8c8c8c", Status.PAUSED: "#9467bd"}


@dataclass(frozen=True)
class Plot:
    """A PNG the report wrote, with what the HTML page says about it."""

    path: Path
    title: str
    caption: str


def figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save(fig: Figure, path: Path, title: str, caption: str) -> Plot:
    """Save the PNG whole or not at all (a full disk left a 0-byte one)."""
    with written_whole(path) as temp:
        fig.savefig(temp, format="png", dpi=DPI)
    return Plot(path, title, caption)


def spans_decades(values: np.ndarray) -> bool:
    """Whether a log axis reads better: all finite values positive, spanning a decade or more
    (a classifier's losses fall from 2.3 to 0.1: on a linear axis every improvement after the
    first is a flat line at the bottom)."""
    finite = values[np.isfinite(values)]
    return bool(len(finite)) and float(finite.min()) > 0 and \
        float(finite.max()) >= 10 * float(finite.min())


def objective_label(run: RunData) -> str:
    """The axis label of the objective's results: a loss, or a maximized value."""
    return VALUE_LABEL if maximizing(run) else LOSS_LABEL


def running_best(run: RunData, values: np.ndarray) -> np.ndarray:
    """The best value so far at each position (lowest, or highest when maximizing)."""
    return np.maximum.accumulate(values) if maximizing(run) else np.minimum.accumulate(values)


def loss_axis(ax: Any, losses: np.ndarray, label: str = LOSS_LABEL) -> None:
    if spans_decades(losses):
        finite = losses[np.isfinite(losses)]
        log_axis(ax, "y", float(finite.min()), float(finite.max()))
    ax.set_ylabel(label)


def log_axis(ax: Any, which: str, low: float, high: float) -> None:
    """A log scale; over less than three decades, ticks at 1, 2 and 5 in plain numbers
    (matplotlib's default labels only the powers of ten: one or two labels)."""
    ax.set_xscale("log") if which == "x" else ax.set_yscale("log")
    axis = ax.xaxis if which == "x" else ax.yaxis
    if high < 1000 * low:
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())


def time_unit(span: float) -> tuple[float, str]:
    """A divisor and unit that keep wall-time ticks short."""
    if span > 2 * 3600:
        return 3600.0, "h"
    if span > 2 * 60:
        return 60.0, "min"
    return 1.0, "s"


def run_start(run: RunData) -> float:
    """When the run's first job began (or its first evaluation started, without a jobs table)."""
    starts = [float(v) for v in run.jobs["start"] if math.isfinite(v)]
    started = np.concatenate([run.individuals["started"], run.parts["started"]])
    starts += [float(started[np.isfinite(started)].min())] if np.isfinite(started).any() else []
    return min(starts) if starts else 0.0


def island_colour(island: int) -> str:
    return f"C{island % 10}"


def dots(count: int) -> dict[str, float]:
    """Marker size and opacity for a scatter of ``count`` points: smaller and fainter when many,
    so that thousands of evaluations show their density instead of a solid block."""
    if count <= 1000:
        return {"s": 16.0, "alpha": 0.5}
    return {"s": 5.0, "alpha": 0.2} if count <= 20_000 else {"s": 2.0, "alpha": 0.1}
