"""Where good parameters lie: loss against each parameter, parallel coordinates of the best."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.collections import LineCollection
from matplotlib.colors import LogNorm, Normalize, to_rgba
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from atoll.individual import Status
from atoll.record.reader import RunData
from atoll.space import CategoricalParam, FloatParam, Param
from atoll.views.facts import ranked, usable, value_name, values
from atoll.views.plots.common import (
    STATUS_COLOURS,
    Plot,
    dots,
    figure,
    log_axis,
    loss_axis,
    objective_label,
    save,
    spans_decades,
)


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
        log_axis(ax, "x", low, high)
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


def _parameters_title(run: RunData) -> str:
    return f"{value_name(run).capitalize()} against each parameter"


def parameters_figure(run: RunData) -> Figure | str:
    """Every evaluation's value against each parameter, or a note why there is none."""
    title = _parameters_title(run)
    ind = run.individuals
    good = usable(ind)
    y = values(run, ind["loss"])
    if not good.any():
        return f"{title} (no evaluation finished with a finite loss)"
    params = run.space.params
    cols = 2 if len(params) in (2, 4) else min(len(params), 3)
    rows = math.ceil(len(params) / cols)
    fig = figure(4.6 * cols + 1.4, 3.6 * rows + 0.8)
    grid = fig.subplots(rows, cols, squeeze=False, sharey=True)
    axes = grid.ravel()
    order = np.argsort(np.argsort(ind["finished"], kind="stable"), kind="stable") + 1
    failed = ind["status"] == int(Status.FAILED)
    pruned = (ind["status"] == int(Status.PRUNED)) & np.isfinite(ind["loss"])
    shown = good | pruned
    rng = np.random.default_rng(0)
    norm = Normalize(1, max(len(ind), 2))
    best = int(np.argmin(np.where(good, ind["loss"], np.inf)))
    scatter = None
    for ax, param in zip(axes, params, strict=False):
        x = _positions(param, ind[param.name], rng)
        scatter = ax.scatter(x[good], y[good], c=order[good], cmap="viridis",
                             norm=norm, linewidths=0, **dots(len(ind)))
        ax.scatter(x[pruned], y[pruned], marker="o", facecolors="none", edgecolors="0.4",
                   linewidths=0.9, s=dots(len(ind))["s"] * 1.6, zorder=1,
                   label=f"pruned: {int(pruned.sum())} (hollow: the value when stopped)")
        ax.scatter([x[best]], [y[best]], marker="*", s=160, color="gold",
                   edgecolors="black", linewidths=0.8, zorder=3, label="best")
        if failed.any():
            ax.scatter(x[failed], np.full(int(failed.sum()), 0.96), marker="x", s=18,
                       color=STATUS_COLOURS[Status.FAILED], transform=ax.get_xaxis_transform(),
                       clip_on=False,
                       label=f"failed: {int(failed.sum())} (no result; in the band at the top)")
        _parameter_axis(ax, param)
        ax.grid(True, alpha=0.3)
    for ax in grid[:, 0]:
        loss_axis(ax, y[shown], objective_label(run))
    if failed.any():
        _headroom(grid[0, 0], y[shown])
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
    fig.suptitle(f"{title}: {int(good.sum())} ok (coloured), " + _others(ind, pruned, failed))
    return fig


def loss_by_parameter(run: RunData, out: Path, top: int) -> Plot | str:
    fig = parameters_figure(run)
    if isinstance(fig, str):
        return fig
    return save(fig, out / "parameters.png", _parameters_title(run),
                 f"Each evaluation's {value_name(run)} against each parameter value, coloured "
                 "by when it finished; pruned evaluations as hollow grey circles at the value "
                 "they returned when stopped, failed ones as crosses in a band at the top; log "
                 "axes for log-scale parameters, jittered strips for choices.")


def _others(ind: np.ndarray, pruned: np.ndarray, failed: np.ndarray) -> str:
    """What the plot shows besides the ok results, and what it leaves out, in counts."""
    status = ind["status"]
    left = int(np.count_nonzero(status == int(Status.INTERRUPTED))) + \
        int(np.count_nonzero((status == int(Status.PRUNED)) & ~pruned)) + \
        int(np.count_nonzero((status == int(Status.OK)) & ~np.isfinite(ind["loss"])))
    text = f"{int(pruned.sum())} pruned (hollow), {int(failed.sum())} failed (x)"
    return text + (f"; {left} without a value not shown" if left else "")


def _headroom(ax: Any, losses: np.ndarray) -> None:
    """Room above the highest loss for the failed evaluations' band."""
    low, high = float(losses.min()), float(losses.max())
    if ax.get_yscale() == "log":
        ax.set_ylim(top=high * (high / low) ** 0.15)
    else:
        ax.set_ylim(top=high + 0.15 * ((high - low) or 1.0))


# -- parallel coordinates of the best quarter --------------------------------------------------
PARALLEL_TITLE = "Parallel coordinates of the best quarter"


def parallel_figure(run: RunData) -> Figure | str:
    """The best quarter's lines over the pruned and failed ones, or a note why there are
    none."""
    title = PARALLEL_TITLE
    best = ranked(run)
    if len(best) < 2:
        return f"{title} (fewer than 2 evaluations with a finite loss)"
    shown = best[: max(math.ceil(len(best) / 4), min(len(best), 5))]
    params = run.space.params
    xs = np.arange(len(params) + 1)
    fig = figure(max(8.0, 1.9 * len(xs) + 2.5), 5.2)
    ax = fig.subplots()
    stopped = {status: run.individuals[run.individuals["status"] == int(status)]
               for status in (Status.PRUNED, Status.FAILED)}
    columns, scales = _parameter_columns(ax, xs[:-1], params, shown, stopped)
    losses = values(run, shown["loss"])
    log = spans_decades(losses)
    lo, hi = float(losses.min()), float(losses.max())
    norm = LogNorm(lo, hi) if log and hi > lo else Normalize(lo, hi if hi > lo else lo + 1)
    order = np.argsort(-shown["loss"], kind="stable")  # the best drawn last, on top
    _best_lines(ax, xs, columns, losses, order, norm, log)
    _stopped_lines(ax, stopped, scales, xs[:-1], len(best))
    _loss_ticks(ax, xs[-1], lo, hi, log)
    ax.vlines(xs, 0, 1, color="black", linewidth=0.8)
    ax.set_xticks(xs, [p.name for p in params] + [value_name(run)])
    ax.set_xlim(-0.45, xs[-1] + 0.45)
    ax.set_ylim(-0.04, 1.04)
    ax.set_yticks([])
    for side in ("left", "right", "top", "bottom"):
        ax.spines[side].set_visible(False)
    fig.colorbar(ScalarMappable(norm, "viridis"), ax=ax, label=objective_label(run), shrink=0.8,
                 aspect=25)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=len(labels),
                   fontsize="small", frameon=False)
    fig.suptitle(f"Parallel coordinates: the best {len(shown)} of {len(best)} ok evaluations "
                 f"(coloured); {len(stopped[Status.PRUNED])} pruned, "
                 f"{len(stopped[Status.FAILED])} failed")
    return fig


def _parameter_columns(ax: Any, xs: np.ndarray, params: Sequence[Param], shown: np.ndarray,
                       stopped: dict[Status, np.ndarray]
                       ) -> tuple[list[list[float]], list[_AxisScale]]:
    """Each parameter's axis, scaled to the values of the shown and the stopped evaluations
    and labelled at its ticks: the shown evaluations' positions on it, and its scale."""
    columns, scales = [], []
    for x, param in zip(xs, params, strict=True):
        points = [_value(param, v) for v in shown[param.name]]
        everyone = points + [_value(param, v) for rows in stopped.values()
                             for v in rows[param.name]]
        scale = _AxisScale(param, everyone)
        scales.append(scale)
        columns.append([scale.position(v) for v in points])
        for value in scale.ticks(everyone):
            label = f"{value:.3g}" if isinstance(value, float) else str(value)
            ax.text(x - 0.04, scale.position(value), label, ha="right", va="center",
                    fontsize="small", zorder=4,
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 1, "alpha": 0.8})
    return columns, scales


def _best_lines(ax: Any, xs: np.ndarray, columns: list[list[float]], losses: np.ndarray,
                order: np.ndarray, norm: Normalize, log: bool) -> None:
    """One line per shown evaluation, its value on the last axis and coloured by it, drawn
    in ``order``; thin and faint when many, but the last 50 drawn stay strong."""
    lo, hi = float(losses.min()), float(losses.max())
    if hi > lo:
        scaled = (np.log(losses / lo) / math.log(hi / lo)) if log else (losses - lo) / (hi - lo)
    else:
        scaled = np.full(len(losses), 0.5)
    ys = np.column_stack([*columns, scaled])
    colours = colormaps["viridis"](norm(losses[order]))
    many = len(losses) > 200
    if many:
        colours[:, 3] = np.where(np.arange(len(order)) >= len(order) - 50, 0.9, 0.2)
    else:
        colours[:, 3] = 0.8
    ax.add_collection(LineCollection([np.column_stack([xs, ys[i]]) for i in order],
                                     colors=colours, linewidths=0.5 if many else 1.3))


def parallel_coordinates(run: RunData, out: Path, top: int) -> Plot | str:
    fig = parallel_figure(run)
    if isinstance(fig, str):
        return fig
    return save(fig, out / "parallel.png", PARALLEL_TITLE,
                 "The best quarter of the ok evaluations (at least 5): each line is one "
                 f"individual's parameters and {value_name(run)}. Behind them, the pruned "
                 "(grey) and failed (red, dashed) evaluations' parameters, without a value. A "
                 "numeric axis spans the values these individuals have (log-aware), a "
                 "categorical one all its choices.")


def _stopped_lines(ax: Any, stopped: dict[Status, np.ndarray], scales: list[_AxisScale],
                   xs: np.ndarray, ok: int) -> None:
    """The pruned and failed evaluations' parameters, faded behind the best, one labelled line
    collection each; they end at the last parameter, as their values do not compare."""
    styles = {Status.PRUNED: ("0.45", "solid", "grey"), Status.FAILED: (
        STATUS_COLOURS[Status.FAILED], "dashed", "red, dashed")}
    for status, rows in stopped.items():
        if not len(rows) or len(xs) < 2:
            continue
        colour, style, looks = styles[status]
        faint = len(rows) + ok > 200
        lines = [np.column_stack([xs, [s.position(_value(s.param, row[s.param.name]))
                                       for s in scales]]) for row in rows]
        ax.add_collection(LineCollection(
            lines, colors=[to_rgba(colour, 0.15 if faint else 0.45)], linestyles=style,
            linewidths=0.8, zorder=1,
            label=f"{status.name.lower()}: {len(rows)} ({looks}; parameters only)"))


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
