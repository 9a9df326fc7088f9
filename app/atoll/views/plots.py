"""The report's PNG plots, drawn with matplotlib's Agg canvas (no display, no pyplot state).

Imported only when plots are asked for, so the rest of the report works without matplotlib.
Each ``draw_*`` function returns a :class:`Plot` or, when the run's data does not allow it, a
one-line note saying why it was skipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.colors import LogNorm, Normalize, to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from atoll.individual import Status
from atoll.record.reader import RunData
from atoll.space import CategoricalParam, FloatParam, Param
from atoll.views.report import LOSS_METRIC, best_epochs, metric_names, ranked, usable

DPI = 100
LOSS_LABEL = "loss (objective units, lower is better)"
STATUS_COLOURS = {Status.OK: "#4c72b0", Status.FAILED: "#d62728", Status.PRUNED: "#ff7f0e",
                  Status.INTERRUPTED: "#8c8c8c"}
GAP_COLOUR = "0.88"


@dataclass(frozen=True)
class Plot:
    """A PNG the report wrote, with what the HTML page says about it."""

    path: Path
    title: str
    caption: str


Drawer = Callable[[RunData, Path, int], "Plot | str"]


def draw_all(run: RunData, out: Path, top: int) -> tuple[list[Plot], list[str]]:
    """Every plot the run's data allows, and a note for each one skipped."""
    plots: list[Plot] = []
    skipped: list[str] = []
    drawers: tuple[Drawer, ...] = (best_loss, epoch_curves, loss_by_parameter,
                                   parallel_coordinates, timeline)
    for draw in drawers:
        result = draw(run, out, top)
        if isinstance(result, Plot):
            plots.append(result)
        else:
            skipped.append(result)
    return plots, skipped


# -- helpers -----------------------------------------------------------------------------------
def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path, title: str, caption: str) -> Plot:
    fig.savefig(path, format="png", dpi=DPI)
    return Plot(path, title, caption)


def spans_decades(values: np.ndarray) -> bool:
    """Whether a log axis reads better: all finite values positive, spanning a decade or more
    (a classifier's losses fall from 2.3 to 0.1: on a linear axis every improvement after the
    first is a flat line at the bottom)."""
    finite = values[np.isfinite(values)]
    return bool(len(finite)) and float(finite.min()) > 0 and \
        float(finite.max()) >= 10 * float(finite.min())


def _loss_axis(ax: Any, losses: np.ndarray) -> None:
    if spans_decades(losses):
        finite = losses[np.isfinite(losses)]
        _log_axis(ax, "y", float(finite.min()), float(finite.max()))
    ax.set_ylabel(LOSS_LABEL)


def _log_axis(ax: Any, which: str, low: float, high: float) -> None:
    """A log scale; over less than three decades, ticks at 1, 2 and 5 in plain numbers
    (matplotlib's default labels only the powers of ten: one or two labels)."""
    ax.set_xscale("log") if which == "x" else ax.set_yscale("log")
    axis = ax.xaxis if which == "x" else ax.yaxis
    if high < 1000 * low:
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())


def _time_unit(span: float) -> tuple[float, str]:
    """A divisor and unit that keep wall-time ticks short."""
    if span > 2 * 3600:
        return 3600.0, "h"
    if span > 2 * 60:
        return 60.0, "min"
    return 1.0, "s"


def _run_start(run: RunData) -> float:
    """When the run's first job began (or its first evaluation started, without a jobs table)."""
    starts = [float(v) for v in run.jobs["start"] if math.isfinite(v)]
    started = run.individuals["started"]
    starts += [float(started[np.isfinite(started)].min())] if np.isfinite(started).any() else []
    return min(starts) if starts else 0.0


def _island_colour(island: int) -> str:
    return f"C{island % 10}"


# -- best loss over the search -----------------------------------------------------------------
def best_loss(run: RunData, out: Path, top: int) -> Plot | str:
    title = "Best loss so far, per island"
    ind = run.individuals[np.isfinite(run.individuals["finished"])]
    ind = ind[np.argsort(ind["finished"], kind="stable")]
    good = usable(ind)
    if not good.any():
        return f"{title} (no evaluation finished with a finite loss)"
    count = np.arange(1, len(ind) + 1)
    t0 = _run_start(run)
    divisor, unit = _time_unit(float(ind["finished"][-1] - t0))
    elapsed = (ind["finished"] - t0) / divisor
    fig = _figure(12, 5.0)
    axes = fig.subplots(1, 2, sharey=True)
    overall = np.minimum.accumulate(np.where(good, ind["loss"], np.inf))
    shown = np.isfinite(overall)
    for ax, x, xlabel in ((axes[0], count, "evaluations finished (whole run)"),
                          (axes[1], elapsed, f"wall time since the run began ({unit})")):
        # The run's best is a wide band under the islands' lines: it always equals one of them.
        ax.step(np.append(x[shown], x[-1]), np.append(overall[shown], overall[-1]),
                where="post", color="0.75", linewidth=6, alpha=0.7, zorder=1,
                label="whole run: best so far")
        for island in np.unique(ind["island"]):
            on = (ind["island"] == island) & good
            colour = _island_colour(int(island))
            ax.scatter(x[on], ind["loss"][on], s=16, color=colour, alpha=0.45, linewidths=0,
                       zorder=2)
            best = np.minimum.accumulate(ind["loss"][on])
            ax.step(np.append(x[on], x[-1]), np.append(best, best[-1]), where="post",
                    color=colour, linewidth=1.6, zorder=3,
                    label=f"island {int(island)}: best so far (dots: its evaluations)")
        ax.set_xlabel(xlabel)
        ax.grid(True, alpha=0.3)
    axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))
    _loss_axis(axes[0], ind["loss"][good])
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 3),
               fontsize="small", frameon=False)
    fig.suptitle(title)
    return _save(fig, out / "best_loss.png", title,
                 "Lowest loss found so far against the number of evaluations finished and "
                 "against wall time; dots are single evaluations, coloured by island.")


# -- per-epoch curves of the best --------------------------------------------------------------
def _curve_metrics(names: list[str]) -> list[str]:
    """A loss-like and an accuracy-like validation metric where reported, else the first."""
    loss = [n for n in names if n == LOSS_METRIC] or [n for n in names if "loss" in n.lower()]
    acc = [n for n in names if "acc" in n.lower()]
    acc = [n for n in acc if n.lower().startswith("val")] or acc
    chosen = loss[:1] + acc[:1]
    return chosen or names[:1]


def epoch_curves(run: RunData, out: Path, top: int) -> Plot | str:
    title = "Per-epoch validation curves of the best"
    names = metric_names(run.epochs)
    if not len(run.epochs) or not names:
        return f"{title} (no epochs recorded: the objective reported none)"
    best = ranked(run)
    with_epochs = set(int(i) for i in run.epochs["individual"])
    chosen = [row for row in best if int(row["id"]) in with_epochs][:top]
    if not chosen:
        return f"{title} (none of the ok individuals reported epochs)"
    metrics = _curve_metrics(names)
    marks = best_epochs(run)
    fig = _figure(5.5 * len(metrics) + 1.0, 4.8)
    axes = np.atleast_1d(fig.subplots(1, len(metrics), squeeze=False)[0])
    for rank, row in enumerate(chosen):
        ident = int(row["id"])
        rows = run.epochs[run.epochs["individual"] == ident]
        colour = f"C{rank % 10}"
        for ax, metric in zip(axes, metrics, strict=True):
            ax.plot(rows["epoch"], rows[metric], marker="o", markersize=3, color=colour,
                    linewidth=2.4 if rank == 0 else 1.2, zorder=3 if rank == 0 else 2,
                    label=f"#{ident} (loss {float(row['loss']):.4g})")
            mark = marks.get(ident)
            if mark is not None and np.isfinite(mark[metric]):
                ax.plot([mark["epoch"]], [mark[metric]], marker="o", markersize=9,
                        markerfacecolor="none", markeredgecolor=colour, linewidth=0)
    for ax, metric in zip(axes, metrics, strict=True):
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(_metric_label(metric, run.epochs[metric]))
        ax.set_title(metric)
        ax.grid(True, alpha=0.3)
    axes[-1].legend(title="individual", fontsize="small", loc="center left",
                    bbox_to_anchor=(1.02, 0.5))
    fig.suptitle(f"Per-epoch validation curves of the best {len(chosen)} (circle: best epoch)")
    return _save(fig, out / "epochs.png", title,
                 f"{', '.join(metrics)} at each epoch for the best individuals that reported "
                 "epochs; the open circle marks each one's best epoch.")


def _metric_label(metric: str, values: np.ndarray) -> str:
    finite = values[np.isfinite(values)]
    if "acc" in metric.lower() and len(finite) and finite.min() >= 0 and finite.max() <= 1:
        return f"{metric} (fraction correct)"
    if "loss" in metric.lower():
        return f"{metric} (objective units)"
    return f"{metric} (as reported)"


# -- loss against each parameter ---------------------------------------------------------------
def _is_log(param: Param) -> bool:
    return bool(getattr(param, "log", False))


def _positions(param: Param, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Where values go on the x axis: choices become jittered strips at their index, small
    integer ranges are jittered too so equal values do not hide each other."""
    if isinstance(param, CategoricalParam):
        index = np.array([param.choices.index(v) if v in param.choices else -1
                          for v in values.tolist()], dtype=float)
        return index + rng.uniform(-0.18, 0.18, len(index))
    numbers = values.astype(float)
    if _jittered(param):
        return numbers + rng.uniform(-0.15, 0.15, len(numbers))
    return numbers


def _jittered(param: Param) -> bool:
    """Integers of a small linear range: equal values would hide each other."""
    return not isinstance(param, (FloatParam, CategoricalParam)) and not _is_log(param) and \
        param.high - param.low <= 30


def _parameter_axis(ax: Any, param: Param) -> None:
    if isinstance(param, CategoricalParam):
        ax.set_xticks(range(len(param.choices)), [str(c) for c in param.choices])
        ax.set_xlim(-0.5, len(param.choices) - 0.5)
        ax.set_xlabel(f"{param.name} ({param.kind}; points jittered)")
        return
    low, high = float(param.low), float(param.high)  # type: ignore[union-attr]
    if _is_log(param):
        _log_axis(ax, "x", low, high)
        pad = (high / low) ** 0.03
        ax.set_xlim(low / pad, high * pad)
        ax.set_xlabel(f"{param.name} (log scale)")
        return
    pad = 0.5 if _jittered(param) else 0.03 * (high - low) or 0.5
    ax.set_xlim(low - pad, high + pad)
    if isinstance(param, FloatParam):
        ax.set_xlabel(param.name)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(f"{param.name} (integer{'; points jittered' if _jittered(param) else ''})")


def loss_by_parameter(run: RunData, out: Path, top: int) -> Plot | str:
    title = "Loss against each parameter"
    ind = run.individuals
    good = usable(ind)
    if not good.any():
        return f"{title} (no evaluation finished with a finite loss)"
    params = run.space.params
    cols = 2 if len(params) in (2, 4) else min(len(params), 3)
    rows = math.ceil(len(params) / cols)
    fig = _figure(4.6 * cols + 1.4, 3.6 * rows + 0.8)
    grid = fig.subplots(rows, cols, squeeze=False, sharey=True)
    axes = grid.ravel()
    order = np.argsort(np.argsort(ind["finished"], kind="stable"), kind="stable") + 1
    failed = ind["status"] == int(Status.FAILED)
    rng = np.random.default_rng(0)
    norm = Normalize(1, max(len(ind), 2))
    best = int(np.argmin(np.where(good, ind["loss"], np.inf)))
    scatter = None
    for ax, param in zip(axes, params, strict=False):
        x = _positions(param, ind[param.name], rng)
        scatter = ax.scatter(x[good], ind["loss"][good], c=order[good], cmap="viridis",
                             norm=norm, s=14, alpha=0.75, linewidths=0)
        ax.scatter([x[best]], [ind["loss"][best]], marker="*", s=160, color="gold",
                   edgecolors="black", linewidths=0.8, zorder=3, label="best")
        if failed.any():
            ax.scatter(x[failed], np.full(int(failed.sum()), 0.96), marker="x", s=18,
                       color=STATUS_COLOURS[Status.FAILED], transform=ax.get_xaxis_transform(),
                       clip_on=False, label="failed (no loss; in the band at the top)")
        _parameter_axis(ax, param)
        ax.grid(True, alpha=0.3)
    for ax in grid[:, 0]:
        _loss_axis(ax, ind["loss"][good])
    if failed.any():
        _headroom(grid[0, 0], ind["loss"][good])
    for ax in axes[len(params):]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize="small",
               frameon=False)
    if scatter is not None:
        bar = fig.colorbar(scatter, ax=list(axes[: len(params)]), shrink=0.9 if rows == 1
                           else 0.6, aspect=25, label="evaluation number (order finished)")
        bar.locator = MaxNLocator(integer=True)
        bar.update_ticks()
    fig.suptitle(title)
    return _save(fig, out / "parameters.png", title,
                 "Each evaluation's loss against each parameter value, coloured by when it "
                 "finished; log axes for log-scale parameters, jittered strips for choices.")


def _headroom(ax: Any, losses: np.ndarray) -> None:
    """Room above the highest loss for the failed evaluations' band."""
    low, high = float(losses.min()), float(losses.max())
    if ax.get_yscale() == "log":
        ax.set_ylim(top=high * (high / low) ** 0.15)
    else:
        ax.set_ylim(top=high + 0.15 * ((high - low) or 1.0))


# -- parallel coordinates of the best quarter --------------------------------------------------
def parallel_coordinates(run: RunData, out: Path, top: int) -> Plot | str:
    title = "Parallel coordinates of the best quarter"
    best = ranked(run)
    if len(best) < 2:
        return f"{title} (fewer than 2 evaluations with a finite loss)"
    shown = best[: max(math.ceil(len(best) / 4), min(len(best), 5))]
    params = run.space.params
    xs = np.arange(len(params) + 1)
    fig = _figure(max(8.0, 1.9 * len(xs) + 2.5), 5.2)
    ax = fig.subplots()
    columns = []
    for x, param in zip(xs, params, strict=False):
        values = [_value(param, v) for v in shown[param.name]]
        scale = _AxisScale(param, values)
        columns.append([scale.position(v) for v in values])
        for value in scale.ticks(values):
            label = f"{value:.3g}" if isinstance(value, float) else str(value)
            ax.text(x - 0.04, scale.position(value), label, ha="right", va="center",
                    fontsize="small", zorder=4,
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 1, "alpha": 0.8})
    losses = shown["loss"].astype(float)
    log = spans_decades(losses)
    lo, hi = float(losses.min()), float(losses.max())
    if hi > lo:
        scaled = (np.log(losses / lo) / math.log(hi / lo)) if log else (losses - lo) / (hi - lo)
    else:
        scaled = np.full(len(losses), 0.5)
    ys = np.column_stack([*columns, scaled])
    norm = LogNorm(lo, hi) if log and hi > lo else Normalize(lo, hi if hi > lo else lo + 1)
    order = np.argsort(-losses, kind="stable")  # the best drawn last, on top
    lines = LineCollection([np.column_stack([xs, ys[i]]) for i in order], cmap="viridis",
                           norm=norm, linewidths=1.3, alpha=0.8)
    lines.set_array(losses[order])
    ax.add_collection(lines)
    _loss_ticks(ax, xs[-1], lo, hi, log)
    ax.vlines(xs, 0, 1, color="black", linewidth=0.8)
    ax.set_xticks(xs, [p.name for p in params] + ["loss"])
    ax.set_xlim(-0.45, xs[-1] + 0.45)
    ax.set_ylim(-0.04, 1.04)
    ax.set_yticks([])
    for side in ("left", "right", "top", "bottom"):
        ax.spines[side].set_visible(False)
    fig.colorbar(lines, ax=ax, label=LOSS_LABEL, shrink=0.8, aspect=25)
    fig.suptitle(f"Parallel coordinates: the best {len(shown)} of {len(best)} ok evaluations")
    return _save(fig, out / "parallel.png", title,
                 "The best quarter of the ok evaluations (at least 5): each line is one "
                 "individual's parameters and loss. A numeric axis spans the values these "
                 "individuals have (log-aware), a categorical one all its choices.")


class _AxisScale:
    """Where a parameter value sits on its parallel axis, in [0, 1]."""

    def __init__(self, param: Param, values: list[Any]) -> None:
        self.param = param
        units = [param.to_unit(v) for v in values]
        self.low, self.high = min(units), max(units)

    def position(self, value: Any) -> float:
        unit = self.param.to_unit(value)
        if isinstance(self.param, CategoricalParam):
            return unit
        if self.high == self.low:
            return 0.5
        return (unit - self.low) / (self.high - self.low)

    def ticks(self, values: list[Any]) -> list[Any]:
        """Every choice; the distinct values when few; else the ends and the middle."""
        if isinstance(self.param, CategoricalParam):
            return list(self.param.choices)
        distinct = sorted(set(values))
        if len(distinct) <= 4:
            return distinct
        return [distinct[0], self.param.from_unit((self.low + self.high) / 2), distinct[-1]]


def _value(param: Param, value: Any) -> Any:
    value = value.item() if isinstance(value, np.generic) else value
    return value.decode() if isinstance(value, bytes) else value


def _loss_ticks(ax: Any, x: float, lo: float, hi: float, log: bool) -> None:
    mid = math.sqrt(lo * hi) if log else (lo + hi) / 2
    for unit, value in ((0.0, lo), (0.5, mid), (1.0, hi)):
        ax.text(x + 0.04, unit, f"{value:.3g}", ha="left", va="center", fontsize="small")


# -- per-worker timeline -----------------------------------------------------------------------
def timeline(run: RunData, out: Path, top: int) -> Plot | str:
    title = "Per-worker timeline"
    ind = run.individuals
    timed = ind[np.isfinite(ind["started"]) & np.isfinite(ind["finished"])]
    if not len(timed):
        return f"{title} (no evaluation has start and end times)"
    t0 = _run_start(run)
    stops = [float(v) for v in run.jobs["stop"] if math.isfinite(v)]
    end = max([float(timed["finished"].max()), *stops])
    divisor, unit = _time_unit(end - t0)
    workers = np.unique(timed["worker"])
    fig = _figure(12, min(1.8 + 0.42 * len(workers), 30))
    ax = fig.subplots()
    for row, worker in enumerate(workers):
        mine = timed[timed["worker"] == worker]
        mine = mine[np.argsort(mine["started"], kind="stable")]
        # Back-to-back evaluations of one status alternate two shades, so each bar shows.
        shade = np.arange(len(mine)) % 2 == 1
        for status, colour in STATUS_COLOURS.items():
            for alternate in (False, True):
                these = mine[(mine["status"] == int(status)) & (shade == alternate)]
                if len(these):
                    spans = list(zip((these["started"] - t0) / divisor,
                                     (these["finished"] - these["started"]) / divisor,
                                     strict=True))
                    tone = _lighter(colour) if alternate else colour
                    ax.broken_barh(spans, (row - 0.35, 0.7), facecolors=tone, edgecolors=tone,
                                   linewidth=0.4)
        ax.text(1.01, row, _busy_text(mine, end - t0), transform=ax.get_yaxis_transform(),
                va="center", fontsize="small")
    gaps = _job_gaps(ax, run, t0, divisor)
    present = {Status(int(s)) for s in np.unique(timed["status"])}
    handles = [Patch(color=colour, label=status.name.lower())
               for status, colour in STATUS_COLOURS.items() if status in present]
    handles.append(Patch(facecolor="white", edgecolor="black", linewidth=0.5,
                         label="idle (gap)"))
    if gaps:
        handles.append(Patch(color=GAP_COLOUR, label="no job running"))
    ax.set_yticks(range(len(workers)), [f"worker {int(w)}" for w in workers])
    ax.set_ylim(len(workers) - 0.5, -0.5)
    ax.set_xlim(0, (end - t0) / divisor)
    ax.set_xlabel(f"wall time since the run began ({unit})")
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles),
               fontsize="small", frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(f"{title}: one bar per evaluation; right: share of the run's wall time")
    return _save(fig, out / "timeline.png", title,
                 "One bar per evaluation, coloured by how it ended; gaps are idle time "
                 "(start-up, waiting, no job running). Right: each worker's busy, failed and "
                 "idle share of the run's wall time.")


def _busy_text(mine: np.ndarray, span: float) -> str:
    if span <= 0:
        return ""
    busy = float((mine["finished"] - mine["started"]).sum())
    failed = mine[mine["status"] == int(Status.FAILED)]
    lost = float((failed["finished"] - failed["started"]).sum())
    failed_text = f" (failed {100 * lost / span:.0f}%)" if len(failed) else ""
    idle = 100 * max(span - busy, 0) / span
    return f"busy {100 * busy / span:.0f}%{failed_text}, idle {idle:.0f}%"


def _lighter(colour: str) -> tuple[float, float, float]:
    red, green, blue = to_rgb(colour)
    return (red + (1 - red) * 0.35, green + (1 - green) * 0.35, blue + (1 - blue) * 0.35)


def _job_gaps(ax: Any, run: RunData, t0: float, divisor: float) -> int:
    """Shade the time between one job's end (or last record) and the next one's start."""
    jobs = run.jobs[np.argsort(run.jobs["start"], kind="stable")]
    finished = run.individuals["finished"]
    shaded = 0
    for before, after in zip(jobs[:-1], jobs[1:], strict=True):
        stop = float(before["stop"])
        if not math.isfinite(stop):  # killed: its last evaluation recorded before the next job
            earlier = finished[np.isfinite(finished) & (finished < after["start"])]
            stop = float(earlier.max()) if len(earlier) else float(before["start"])
        if stop < after["start"]:
            ax.axvspan((stop - t0) / divisor, (after["start"] - t0) / divisor,
                       color=GAP_COLOUR, zorder=0)
            shaded += 1
    return shaded
