"""Inherited weights: which individual started from which one's checkpoint, at which epoch.

One row per individual of a lineage (it inherited, or was inherited from), its trained epochs as
a bar coloured by its loss; a grey link joins the parent's epoch it started from to the child's
first epoch, dashed when the child has a second parent (a PBT member replaced by a copy). Rows
are in order of id, so time runs down the page.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.cm import ScalarMappable
from matplotlib.colors import LogNorm, Normalize

from atoll.individual import NO_PARENT
from atoll.record.reader import RunData
from atoll.views.facts import maximizing
from atoll.views.plots.common import Plot, figure, objective_label, save, spans_decades

MAX_ROWS = 200
"""More rows than this: only the lineages of the best individuals are drawn."""


def lineage(run: RunData, out: Path, top: int) -> Plot | None:
    """None when no individual inherited: the run has no lineage to show."""
    title = "Lineage of inherited weights"
    ind = run.individuals
    if "inherit_from" not in (ind.dtype.names or ()) or not (ind["inherit_from"] >= 0).any():
        return None
    rows = _rows(ind, top)
    spans = _spans(run, rows)
    fig = figure(11, min(2.0 + 0.22 * len(rows), 40))
    ax = fig.subplots()
    sign = -1.0 if maximizing(run) else 1.0  # colour the objective's own values
    norm = _norm(sign * ind["loss"][np.isin(ind["id"], rows)])
    colours = ScalarMappable(norm=norm, cmap="viridis" if sign < 0 else "viridis_r")
    place = {ident: k for k, ident in enumerate(rows)}
    by_id = {int(i): n for n, i in enumerate(ind["id"].tolist())}
    for ident in rows:
        first, last = spans[ident]
        loss = sign * float(ind["loss"][by_id[ident]])
        colour = colours.to_rgba(np.array(loss)) if np.isfinite(loss) else "#d62728"
        ax.plot([first, last], [place[ident]] * 2, color=colour, linewidth=5,
                solid_capstyle="butt")
        parent = int(ind["inherit_from"][by_id[ident]])
        if parent in place:
            epoch = int(ind["inherit_epoch"][by_id[ident]])
            copied = int(ind["parent_b"][by_id[ident]]) != NO_PARENT  # PBT's exploit, GA's child
            ax.plot([epoch, first], [place[parent], place[ident]], color="0.55",
                    linewidth=0.8, linestyle="--" if copied else "-")
    ax.set_yticks(range(len(rows)), [str(i) for i in rows], fontsize="x-small")
    ax.invert_yaxis()
    ax.set_xlabel("epoch")
    ax.set_ylabel("individual (id)")
    fig.colorbar(colours, ax=ax, label=objective_label(run))
    ax.set_title(title)
    shown = "All lineages" if len(rows) < MAX_ROWS else "The best individuals' lineages"
    return save(fig, out / "lineage.png", title,
                 "Each bar is one individual's trained epochs, coloured by its result (red: "
                 "none); a grey line joins the epoch of the checkpoint it inherited to its first "
                 "epoch: solid when it trained its parent on, dashed when it has a second parent "
                 f"(PBT's copy of a better member, or a GA child). {shown}.")


def _rows(ind: np.ndarray, top: int) -> list[int]:
    """Ids of the individuals in a lineage; past MAX_ROWS, the best ones' ancestors."""
    parent = dict(zip(ind["id"].tolist(), ind["inherit_from"].tolist(), strict=True))
    linked = {i for i, p in parent.items() if p != NO_PARENT} | \
        {p for p in parent.values() if p in parent}
    if len(linked) <= MAX_ROWS:
        return sorted(linked)
    chosen: set[int] = set()
    order = np.argsort(np.where(np.isfinite(ind["loss"]), ind["loss"], np.inf), kind="stable")
    for ident in ind["id"][order].tolist():
        while ident in parent and ident not in chosen and len(chosen) < MAX_ROWS:
            chosen.add(ident)
            ident = parent[ident]
        if len(chosen) >= MAX_ROWS or len(chosen) >= top * 20:
            break
    return sorted(chosen)


def _spans(run: RunData, rows: list[int]) -> dict[int, tuple[float, float]]:
    """Each row's first and last recorded epoch (where none: the epoch after its start)."""
    epochs = run.epochs
    spans = {}
    ind = run.individuals
    start = dict(zip(ind["id"].tolist(), ind["inherit_epoch"].tolist(), strict=True))
    for ident in rows:
        mine = epochs["epoch"][epochs["individual"] == ident]
        first = start[ident] + 1 if start[ident] >= 0 else 0
        spans[ident] = (float(mine.min()), float(mine.max()) + 0.9) if len(mine) else \
            (float(first), first + 0.9)
    return spans


def _norm(losses: np.ndarray) -> Normalize:
    finite = losses[np.isfinite(losses)]
    if not len(finite):
        return Normalize(0.0, 1.0)
    if spans_decades(finite):
        return LogNorm(float(finite.min()), float(finite.max()))
    return Normalize(float(finite.min()), float(finite.max()))
