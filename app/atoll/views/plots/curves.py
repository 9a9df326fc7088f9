"""Every individual's intermediate values: its per-epoch metric, coloured by how it ended.

What Optuna users look at first to judge pruning: the pruned curves stop where they were stopped,
beside the completed ones they were compared with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from atoll.individual import Status
from atoll.record.reader import RunData
from atoll.views.facts import LOSS_METRIC, metric_names, ranked
from atoll.views.plots.common import STATUS_COLOURS, Plot, figure, log_axis, save, spans_decades

UNDER_WAY = None
"""The "status" of a curve whose individual has no row yet: its evaluation is running (epochs
reach the record as they are reported), or a kill cut it short and no job continued it yet."""
DRAW_ORDER: tuple[Status | None, ...] = (Status.INTERRUPTED, Status.PAUSED, Status.FAILED,
                                         Status.PRUNED, UNDER_WAY, Status.OK)
"""Statuses from the bottom layer to the top: completed curves over the ones they judged."""
UNDER_WAY_COLOUR = "#2ca02c"
PRUNED_AT = re.compile(r"pruned at epoch (-?\d+)")
"""The error text the evaluator records for a pruned individual."""
STOPPED = DRAW_ORDER[:-1]
"""The statuses of evaluations whose curves did not complete."""


@dataclass(frozen=True)
class Curve:
    """One individual's reported values of one metric, in epoch order."""

    ident: int
    status: Status | None
    """How its evaluation ended; None (:data:`UNDER_WAY`) while it has no row."""
    epochs: np.ndarray
    values: np.ndarray
    stopped: int
    """Index of the point where the evaluation stopped: the epoch it was pruned at (an
    objective may report epochs after it), else its last."""


def pruning_metric(run: RunData) -> str:
    """The metric the run's pruning rule compared, or "" when pruning was off."""
    pruning = run.config_table.get("pruning")
    if not isinstance(pruning, dict) or pruning.get("rule", "none") == "none":
        return ""
    return str(pruning.get("metric", ""))


def curve_metric(run: RunData) -> str:
    """The metric the curves show: the pruning metric where it was reported, else a loss-like
    one, else the first reported; "" when no metric was reported."""
    names = [n for n in metric_names(run.epochs) if run.epochs.dtype[n].kind == "f"]
    pruned_by = pruning_metric(run)
    if pruned_by in names:
        return pruned_by
    losses = [n for n in names if n == LOSS_METRIC] or [n for n in names if "loss" in n.lower()]
    return (losses or names or [""])[0]


def curves(run: RunData, metric: str) -> list[Curve]:
    """The curve of every individual that reported epochs, with how it ended (its latest
    row's status, for an individual evaluated again after an interruption; :data:`UNDER_WAY`
    for one without a row)."""
    epochs = run.epochs
    if not len(epochs) or metric not in (epochs.dtype.names or ()):
        return []
    ind = run.individuals[np.argsort(run.individuals["finished"], kind="stable")]
    status = dict(zip(ind["id"].tolist(), ind["status"].tolist(), strict=True))
    error = dict(zip(ind["id"].tolist(), ind["error"].tolist(), strict=True))
    order = np.lexsort((epochs["epoch"], epochs["individual"]))
    ids, starts = np.unique(epochs["individual"][order], return_index=True)
    found = []
    for ident, rows in zip(ids.tolist(), np.split(order, starts[1:]), strict=True):
        numbers = epochs["epoch"][rows]
        at = np.flatnonzero(numbers == _pruned_at(error.get(ident, "")))
        found.append(Curve(ident, Status(status[ident]) if ident in status else UNDER_WAY,
                           numbers, epochs[metric][rows].astype(float),
                           int(at[0]) if len(at) else len(rows) - 1))
    return found


def _pruned_at(error: str | bytes) -> int | None:
    """The epoch in a pruned individual's ``pruned at epoch E``, else None."""
    text = error.decode() if isinstance(error, bytes) else str(error)
    found = PRUNED_AT.fullmatch(text.strip())
    return int(found.group(1)) if found else None


def status_label(status: Status | None, count: int) -> str:
    text = {Status.OK: "ok", Status.PRUNED: "pruned (x: where it was stopped)",
            Status.FAILED: "failed (x: last epoch before the error)",
            Status.INTERRUPTED: "interrupted (job stopped)",
            Status.PAUSED: "paused (x: the rung it waits at)",
            UNDER_WAY: "no result yet (x: its last epoch; running, or cut short by a kill)"
            }[status]
    return f"{text}: {count}"


def draw_curves(ax: Any, found: list[Curve], statuses: tuple[Status | None, ...],
                strong: bool) -> None:
    """The curves of ``statuses`` as one line collection each, labelled with their count; the
    curves that did not complete end with an x. ``strong`` draws completed curves opaque,
    otherwise every curve is thin and faded (a background to other lines)."""
    many = len(found) > 200
    for status in statuses:
        mine = [c for c in found if c.status == status]
        if not mine:
            continue
        full = strong and status in (Status.OK, UNDER_WAY)  # the live curves stand out too
        alpha = (0.35 if many else 0.7) if full else (0.15 if many else 0.45)
        shade = UNDER_WAY_COLOUR if status is UNDER_WAY else STATUS_COLOURS[status]
        colour = to_rgba(shade if strong else "0.45", alpha)
        ax.add_collection(LineCollection(
            [np.column_stack([c.epochs, c.values]) for c in mine], colors=[colour],
            linewidths=1.2 if full else 0.8, label=status_label(status, len(mine)),
            zorder=2 if full else 1))
        if status != Status.OK:
            ax.scatter([c.epochs[c.stopped] for c in mine], [c.values[c.stopped] for c in mine],
                       marker="x", s=22 if not many else 8, color=[colour], linewidths=1.0,
                       zorder=2,
                       label=f"_stopped {'under way' if status is None else status.name.lower()}")


def intermediate_figure(run: RunData) -> Figure | str:
    """The figure of every individual's curve, or a note why there is none."""
    title = "Intermediate values of every individual"
    metric = curve_metric(run)
    found = curves(run, metric) if metric else []
    if not found:
        return f"{title} (no epochs recorded: the objective reported none)"
    fig = figure(10, 5.6)
    ax = fig.subplots()
    draw_curves(ax, found, DRAW_ORDER, strong=True)
    best = ranked(run)
    best_curve = next((c for c in found if len(best) and c.ident == int(best["id"][0])), None)
    if best_curve is not None:
        ax.plot(best_curve.epochs, best_curve.values, color="black", linewidth=2.2, zorder=3,
                label=f"best: #{best_curve.ident}")
    values = np.concatenate([c.values for c in found])
    finite = values[np.isfinite(values)]
    if len(finite):
        low, high = float(finite.min()), float(finite.max())
        pad = 0.04 * (high - low) or 0.5
        ax.set_ylim(low - pad, high + pad)
        if spans_decades(finite):
            log_axis(ax, "y", low, high)
            ax.set_ylim(low / 1.1, high * 1.1)
    last = max(int(c.epochs.max()) for c in found)
    first = min(int(c.epochs.min()) for c in found)
    ax.set_xlim(first - 0.2, max(last, first + 1) + 0.2)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    pruned_by = pruning_metric(run)
    ax.set_ylabel(f"{metric} (as reported{'; the pruning metric' if metric == pruned_by else ''})")
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 3),
               fontsize="small", frameon=False)
    under_way = sum(c.status is UNDER_WAY for c in found)
    parts = [f"{len(found) - under_way} of {len(run.individuals)} individuals, by how they "
             "ended"] if len(found) > under_way else []
    parts += [f"{under_way} with no result yet"] if under_way else []
    fig.suptitle(f"Intermediate values: {metric} at each epoch of {'; '.join(parts)}")
    return fig


def intermediate_values(run: RunData, out: Path, top: int) -> Plot | str:
    fig = intermediate_figure(run)
    if isinstance(fig, str):
        return fig
    metric = curve_metric(run)
    return save(fig, out / "intermediate.png", "Intermediate values of every individual",
                f"Every individual's {metric} at each epoch it reported, coloured by how its "
                "evaluation ended; a curve that did not complete (pruned, failed, interrupted, "
                "paused) ends with an x where it stopped, as does one with no result yet "
                "(still running, or cut short by a kill); the best individual's curve in black.")
