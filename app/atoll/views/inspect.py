"""The text ``atoll inspect RUN_DIR`` prints (and a search prints at its end): metadata, the
budget spent, counts by status with the commonest failures, the best individuals with their
main metric (and, in a run whose children inherited weights, whose checkpoint each started
from)."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import numpy as np

from atoll.errors import RecordError
from atoll.individual import FINISHED, Status
from atoll.record import plain
from atoll.record.paths import RunPaths
from atoll.record.reader import RunData
from atoll.record.schema import EPOCH_COLUMNS, MODE_NAMES
from atoll.views.facts import (
    best_epoch_values,
    failure_reasons,
    main_metric,
    maximizing,
    ranked,
    value_name,
    values,
)
from atoll.views.summary import notes, status_counts


def describe(run: RunData, top: int = 10, metric: str | None = None) -> str:
    """``metric``: the epoch metric to show beside the loss (None: the run's main metric;
    "": none). A metric the run never reported is an error that names the ones it did."""
    reported = list(run.epochs.dtype.names or ())[len(EPOCH_COLUMNS):]
    if metric and metric not in reported:
        known = ", ".join(reported) if reported else "none: its objective reports no epochs"
        raise RecordError(f"--metric {metric}: the run reported no such metric (it has "
                          f"{known})")
    lines = [_header(run)]
    lines += _jobs(run.jobs)
    lines += _counts(run)
    lines += _failures(run)
    lines += _best(run, top, main_metric(run) if metric is None else metric)
    return "\n".join(lines)


def _header(run: RunData) -> str:
    meta = run.metadata
    bits = [f"record schema {meta.get('schema_version', '?')}"]
    if "atoll_version" in meta:
        bits.append(f"atoll {meta['atoll_version']}")
    if "created" in meta:
        bits.append(f"created {_when(meta['created'])}")
    lines = [f"Run {meta.get('run_dir', '?')} ({', '.join(bits)})"]
    if meta.get("source") == "results":
        beside = RunPaths(meta.get("run_dir", ".")).worker_files()
        lines.append("Read from results.h5 as given (its run directory's worker files may hold "
                     "newer rows: give the directory to read them)" if beside else
                     "Read from results.h5 (no worker files)")
    return "\n".join(lines + notes(run))


def _jobs(jobs: np.ndarray) -> list[str]:
    lines = [f"Jobs: {len(jobs)}"]
    for index, row in enumerate(jobs):
        start, stop = float(row["start"]), float(row["stop"])
        if math.isfinite(stop):
            end = f"{_when(stop)} ({duration(stop - start)}), exit {int(row['exit_code'])}"
        else:  # only the newest job may still run: an earlier one without an end was killed
            end = "running or killed" if index == len(jobs) - 1 else "killed (no end recorded)"
        layout = " ".join(f"new ids {v[0]}-{v[1] - 1}" if k == "ids" else f"{k}={v}"
                          for k, v in json_value(row["layout"]).items())
        hosts = ",".join(json_value(row["hosts"]))
        slurm = " ".join(f"{k}={v}" for k, v in json_value(row["slurm"]).items())
        line = f"  job {int(row['job'])}: {_when(start)} -> {end}; {layout}; hosts {hosts}"
        lines.append(line + (f"; slurm {slurm}" if slurm else ""))
    return lines


def _counts(run: RunData) -> list[str]:
    status = run.individuals["status"]
    counts = ", ".join(f"{name} {n}" for name, n in status_counts(run.individuals).items())
    modes = run.migrations["mode"]
    moved = int(np.count_nonzero(modes == MODE_NAMES["migration"]))
    pollinated = int(np.count_nonzero(modes == MODE_NAMES["pollination"]))
    budget = int(run.metadata.get("budget") or 0)
    done = int(np.isin(status, FINISHED).sum())
    spent = f"; budget: {done} of {budget} completed" if budget else ""
    paused = int(np.count_nonzero(status == int(Status.PAUSED)))
    spent += f"; {paused} paused, not counted in it" if paused else ""
    unfinished = run.epochs["individual"][~np.isin(run.epochs["individual"],
                                                   run.individuals["id"])]
    ahead_text = (f" ({len(unfinished)} of them from {len(np.unique(unfinished))} evaluation(s) "
                  "with no result yet: running, or cut short by a kill)") if len(unfinished) else ""
    return [f"Evaluations: {len(status)} ({counts}){spent}",
            f"Epochs: {len(run.epochs)}{ahead_text}; migrations: {moved}; "
            f"pollinations: {pollinated}"]


def _failures(run: RunData) -> list[str]:
    reasons = failure_reasons(run.individuals, most=3)
    if not reasons:
        return []
    return ["Commonest failures:"] + [f"  {count} x {reason[:160]}" for reason, count in reasons]


def _best(run: RunData, top: int, metric: str) -> list[str]:
    ok = ranked(run)
    if not len(ok):
        return ["Best: none yet (no individual finished with a finite loss)"]
    if top <= 0:
        return []
    best = ok[:top]
    names = ["id", "loss", "island", "worker", *run.space.names]
    rows = [[_cell(row[n]) for n in names] for row in best]
    names[1] = value_name(run)
    for row, value in zip(rows, values(run, best["loss"]), strict=True):
        row[1] = _cell(value)
    if metric:
        shown = best_epoch_values(run, best["id"].tolist(), metric)
        names.insert(2, metric)
        for row, value in zip(rows, shown, strict=True):
            row.insert(2, _cell(value))
    if _inherited(run):
        names.append("inherited from")
        for row, ind in zip(rows, best, strict=True):
            row.append(_lineage(ind))
    widths = [max(len(n), *(len(r[i]) for r in rows)) for i, n in enumerate(names)]
    order = " (maximize: highest value first)" if maximizing(run) else ""
    out = [f"Best {len(best)} of {len(ok)} ok{order}:",
           "  " + "  ".join(n.rjust(w) for n, w in zip(names, widths, strict=True))]
    out += ["  " + "  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return out


def _inherited(run: RunData) -> bool:
    """Whether any individual of the run started from another one's checkpoint."""
    ind = run.individuals
    return "inherit_from" in (ind.dtype.names or ()) and bool((ind["inherit_from"] >= 0).any())


def _lineage(ind: np.void) -> str:
    """``ID (epoch E)``: the individual and the epoch of the checkpoint it started from."""
    parent = int(ind["inherit_from"])
    return "-" if parent < 0 else f"{parent} (epoch {int(ind['inherit_epoch'])})"


def _cell(value: Any) -> str:
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.6g}"
    return str(plain(value))


def json_value(value: Any) -> Any:
    """A JSON cell of the record (bytes or text) as data; {} where it is none."""
    try:
        return json.loads(value.decode() if isinstance(value, bytes) else value)
    except (TypeError, ValueError):
        return {}


def _when(seconds: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(seconds)))
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"


def duration(seconds: float) -> str:
    """``1h02m03s``, ``2m03s``; ``unknown`` for an infinite or NaN time."""
    if not math.isfinite(seconds):
        return "unknown"
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"
