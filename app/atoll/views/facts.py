"""What every view computes from a run the same way: the usable results and their ranking, the
commonest failure reasons, each individual's best epoch and the run's main metric.

Files only (numpy on :class:`~atoll.record.RunData`): no MPI, no torch.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable

import numpy as np

from atoll.individual import Status
from atoll.record.reader import RunData
from atoll.record.schema import EPOCH_COLUMNS

LOSS_METRIC = "val_loss"
"""Where no reported metric equals an individual's loss, its lowest ``val_loss`` marks its best
epoch (else its last epoch)."""
PREFERRED_METRICS = ("val_accuracy", "accuracy", "val_acc", "acc")
"""Shown beside the loss when the run names no main metric and one of these was reported."""


def maximizing(run: RunData) -> bool:
    """Whether the run's objective is a score to maximize: its recorded ``loss`` is then the
    negated value (the engine only minimizes), and views show the value itself."""
    objective = run.config_table.get("objective")
    return isinstance(objective, dict) and objective.get("direction") == "maximize"


def value_name(run: RunData) -> str:
    """What views call the objective's result: ``loss``, or ``value`` for a maximized score."""
    return "value" if maximizing(run) else "loss"


def values(run: RunData, losses: np.ndarray) -> np.ndarray:
    """The objective's own values of recorded losses (the same numbers when minimizing)."""
    losses = np.asarray(losses, dtype=float)
    return -losses if maximizing(run) else losses


def usable(ind: np.ndarray) -> np.ndarray:
    """Mask of the individuals that count as results: status ok with a finite loss."""
    return (ind["status"] == int(Status.OK)) & np.isfinite(ind["loss"])


def ranked(run: RunData, top: int | None = None) -> np.ndarray:
    """The usable individuals, best (lowest loss) first; the first ``top`` if given."""
    ind = run.individuals[usable(run.individuals)]
    order = np.argsort(ind["loss"], kind="stable")
    return ind[order if top is None else order[:top]]


def reason(error: str) -> str:
    """The ``Type: message`` of a recorded error: its first line (the last of a traceback), and
    for a multi-rank worker (``rank 1: RuntimeError: ...; rank 0: ...``) the first rank's error
    without the rank; where that error only points at another rank's command (``the command
    of worker rank 1 failed``), that rank's error, which says why."""
    lines = [line for line in error.strip().splitlines() if line.strip()]
    if not lines:
        return "(no error text)"
    line = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    parts = [_rank_part(part) for part in _RANK_PARTS.split(line)]
    first = parts[0][1]
    pointer = _POINTER.search(first)
    if pointer is not None:
        first = next((text for ranks, text in parts[1:] if int(pointer[1]) in ranks), first)
    return first.strip() or "(no error text)"


_RANK_PARTS = re.compile(r"; (?=ranks? \d)")
_POINTER = re.compile(r"the command of worker rank (\d+) failed")


def _rank_part(part: str) -> tuple[set[int], str]:
    """(the ranks, the error) of one part of a multi-rank worker's error (no ranks: a
    one-rank worker's)."""
    found = re.match(r"ranks? ([\d, .-]+): ", part)
    if found is None:
        return set(), part
    ranks: set[int] = set()
    for piece in found[1].split(","):
        low, _, high = piece.strip().partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            ranks.update(range(int(low), int(high or low) + 1))
    return ranks, part[found.end():]


def failure_reasons(ind: np.ndarray, most: int = 5) -> list[tuple[str, int]]:
    """The ``most`` commonest reasons of failed evaluations, commonest first."""
    failed = ind["error"][ind["status"] == int(Status.FAILED)]
    return Counter(reason(e.decode() if isinstance(e, bytes) else str(e))
                   for e in failed).most_common(most)


def metric_names(epochs: np.ndarray) -> list[str]:
    return list((epochs.dtype.names or ())[len(EPOCH_COLUMNS):])


def main_metric(run: RunData) -> str:
    """The objective's choice recorded with the run, else a common accuracy name it reported."""
    named = str(run.metadata.get("main_metric") or "")
    if named:
        return named
    reported = metric_names(run.epochs)
    return next((name for name in PREFERRED_METRICS if name in reported), "")


def shown_metrics(run: RunData) -> list[str]:
    """The metrics a table shows: the main metric; else accuracies where reported (validation
    ones first); else up to three of whatever the objective reported."""
    names = metric_names(run.epochs)
    main = main_metric(run)
    if main in names:
        return [main]
    accuracies = [n for n in names if "acc" in n.lower()]
    if accuracies:
        return [n for n in accuracies if n.lower().startswith("val")] or accuracies
    return names[:3]


def best_epochs(run: RunData, ids: Iterable[int] | None = None) -> dict[int, np.void]:
    """Individual id -> the row of its best epoch: the epoch its result came from (one of its
    reported metrics equals the objective's value), else its lowest ``val_loss``, else its
    last. Only for ``ids`` if given."""
    epochs = run.epochs
    if ids is not None:
        epochs = epochs[np.isin(epochs["individual"], list(ids))]
    if not len(epochs):
        return {}
    losses = dict(zip(run.individuals["id"].tolist(),
                      values(run, run.individuals["loss"]).tolist(), strict=True))
    names = [n for n in metric_names(epochs) if epochs.dtype[n].kind == "f"]
    order = np.argsort(epochs["individual"], kind="stable")
    ids, starts = np.unique(epochs["individual"][order], return_index=True)
    best: dict[int, np.void] = {}
    for ident, rows in zip(ids.tolist(), np.split(order, starts[1:]), strict=True):
        rows = rows[np.argsort(epochs["epoch"][rows], kind="stable")]
        best[ident] = epochs[_best_row(epochs, rows, losses.get(ident, math.nan), names)]
    return best


def _best_row(epochs: np.ndarray, rows: np.ndarray, loss: float, names: Iterable[str]) -> int:
    if math.isfinite(loss):
        for name in names:
            match = np.flatnonzero(np.isclose(epochs[name][rows], loss, rtol=1e-12, atol=0.0))
            if len(match):
                return int(rows[match[0]])
    if LOSS_METRIC in (epochs.dtype.names or ()):
        values = epochs[LOSS_METRIC][rows]
        if np.isfinite(values).any():
            return int(rows[int(np.nanargmin(values))])
    return int(rows[-1])


def best_epoch_values(run: RunData, ids: Iterable[int], metric: str) -> list[float]:
    """``metric`` at each individual's best epoch (NaN where it reported none)."""
    ids = list(ids)
    if metric not in metric_names(run.epochs):
        return [math.nan for _ in ids]
    best = best_epochs(run, ids)
    return [float(best[i][metric]) if i in best else math.nan for i in ids]
