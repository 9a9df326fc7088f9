"""How the search went: best loss so far per island, and the best individuals' epochs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from atoll.individual import Status
from atoll.record.reader import RunData
from atoll.views.facts import (
    LOSS_METRIC,
    best_epochs,
    maximizing,
    metric_names,
    ranked,
    usable,
    value_name,
    values,
)
from atoll.views.plots.common import (
    Plot,
    dots,
    figure,
    island_colour,
    loss_axis,
    objective_label,
    run_start,
    running_best,
    save,
    time_unit,
)
from atoll.views.plots.curves import STOPPED, curves, draw_curves


def best_loss(run: RunData, out: Path, top: int) -> Plot | str:
    name = value_name(run)
    title = f"Best {name} so far, per island"
    ind = run.individuals[np.isfinite(run.individuals["finished"])]
    ind = ind[np.argsort(ind["finished"], kind="stable")]
    good = usable(ind)
    y = values(run, ind["loss"])
    pruned = (ind["status"] == int(Status.PRUNED)) & np.isfinite(y)
    if not good.any():
        return f"{title} (no evaluation finished with a finite loss)"
    count = np.arange(1, len(ind) + 1)
    t0 = run_start(run)
    divisor, unit = time_unit(float(ind["finished"][-1] - t0))
    elapsed = (ind["finished"] - t0) / divisor
    fig = figure(12, 5.0)
    axes = fig.subplots(1, 2, sharey=True)
    overall = running_best(run, np.where(good, y, -np.inf if maximizing(run) else np.inf))
    shown = np.isfinite(overall)
    for ax, x, xlabel in ((axes[0], count, "evaluations finished (whole run)"),
                          (axes[1], elapsed, f"wall time since the run began ({unit})")):
        # The run's best is a wide band under the islands' lines: it always equals one of them.
        ax.step(np.append(x[shown], x[-1]), np.append(overall[shown], overall[-1]),
                where="post", color="0.75", linewidth=6, alpha=0.7, zorder=1,
                label="whole run: best so far")
        for island in np.unique(ind["island"]):
            on = (ind["island"] == island) & good
            colour = island_colour(int(island))
            ax.scatter(x[on], y[on], color=colour, linewidths=0, **dots(len(ind)),
                       zorder=2)
            best = running_best(run, y[on])
            ax.step(np.append(x[on], x[-1]), np.append(best, best[-1]), where="post",
                    color=colour, linewidth=1.6, zorder=3,
                    label=f"island {int(island)}: best so far (dots: its evaluations)")
        if pruned.any():
            ax.scatter(x[pruned], y[pruned], marker="o", facecolors="none", edgecolors="0.4",
                       linewidths=0.8, s=dots(len(ind))["s"], zorder=1,
                       label=f"pruned: {int(pruned.sum())} (hollow grey: the value when "
                             "stopped; never a best)")
        ax.set_xlabel(xlabel)
        ax.grid(True, alpha=0.3)
    axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))
    loss_axis(axes[0], y[good | pruned], objective_label(run))
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 3),
               fontsize="small", frameon=False)
    fig.suptitle(title)
    best_found = "Highest value" if maximizing(run) else "Lowest loss"
    return save(fig, out / "best_loss.png", title,
                 f"{best_found} found so far against the number of evaluations finished and "
                 "against wall time; dots are single evaluations, coloured by island; hollow "
                 "grey circles are pruned evaluations at the value they returned when stopped.")


# -- per-epoch curves of the best --------------------------------------------------------------
BEST_COLOURS = (*(f"C{i}" for i in range(10) if i != 7), "navy")
"""matplotlib's cycle with navy for its grey, which the curves that did not complete use."""


def _curve_metrics(names: list[str]) -> list[str]:
    """A loss-like and an accuracy-like validation metric where reported, else the first."""
    loss = [n for n in names if n == LOSS_METRIC] or [n for n in names if "loss" in n.lower()]
    acc = [n for n in names if "acc" in n.lower()]
    acc = [n for n in acc if n.lower().startswith("val")] or acc
    chosen = loss[:1] + acc[:1]
    return chosen or names[:1]


def epochs_figure(run: RunData, top: int) -> Figure | str:
    """The best ``top`` individuals' curves over the faded ones of the evaluations that did not
    complete, or a note why there are none."""
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
    fig = figure(5.5 * len(metrics) + 1.0, 4.8)
    axes = np.atleast_1d(fig.subplots(1, len(metrics), squeeze=False)[0])
    for ax, metric in zip(axes, metrics, strict=True):
        draw_curves(ax, curves(run, metric), STOPPED, strong=False)
    for rank, row in enumerate(chosen):
        ident = int(row["id"])
        rows = run.epochs[run.epochs["individual"] == ident]
        colour = BEST_COLOURS[rank % len(BEST_COLOURS)]
        for ax, metric in zip(axes, metrics, strict=True):
            ax.plot(rows["epoch"], rows[metric], marker="o", markersize=3, color=colour,
                    linewidth=2.4 if rank == 0 else 1.2, zorder=3 if rank == 0 else 2,
                    label=f"#{ident} ({value_name(run)} {float(values(run, row['loss'])):.4g})")
            mark = marks.get(ident)
            if mark is not None and np.isfinite(mark[metric]):
                ax.plot([mark["epoch"]], [mark[metric]], marker="o", markersize=9,
                        markerfacecolor="none", markeredgecolor=colour, linewidth=0)
    shown = run.epochs[np.isin(run.epochs["individual"], [int(r["id"]) for r in chosen])]
    for ax, metric in zip(axes, metrics, strict=True):
        _zoom(ax, shown[metric])
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(_metric_label(metric, run.epochs[metric]))
        ax.set_title(metric)
        ax.grid(True, alpha=0.3)
    axes[-1].legend(title="individual", fontsize="small", loc="center left",
                    bbox_to_anchor=(1.02, 0.5))
    # Two lines: one metric's panel is narrower than the whole title.
    fig.suptitle(f"Per-epoch validation curves of the best {len(chosen)}\n(circle: best epoch; "
                 "grey: evaluations that did not complete)")
    return fig


def epoch_curves(run: RunData, out: Path, top: int) -> Plot | str:
    fig = epochs_figure(run, top)
    if isinstance(fig, str):
        return fig
    return save(fig, out / "epochs.png", "Per-epoch validation curves of the best",
                 "The validation metrics at each epoch of the best individuals that reported "
                 "epochs; the open circle marks each one's best epoch. Thin grey lines are the "
                 "evaluations that did not complete (pruned, failed, interrupted, paused), each "
                 "ending with an x where it stopped; the axes span the best's values, so worse "
                 "curves leave them (intermediate.png shows all of every curve).")


def _zoom(ax: Any, shown: np.ndarray) -> None:
    """Limits around the best curves' values, not around every faded curve behind them."""
    finite = shown[np.isfinite(shown)]
    if len(finite):
        low, high = float(finite.min()), float(finite.max())
        pad = 0.1 * (high - low) or 0.05 * abs(high) or 0.5
        ax.set_ylim(low - pad, high + pad)
    ax.autoscale(axis="x")


def _metric_label(metric: str, values: np.ndarray) -> str:
    finite = values[np.isfinite(values)]
    if "acc" in metric.lower() and len(finite) and finite.min() >= 0 and finite.max() <= 1:
        return f"{metric} (fraction correct)"
    if "loss" in metric.lower():
        return f"{metric} (objective units)"
    return f"{metric} (as reported)"
