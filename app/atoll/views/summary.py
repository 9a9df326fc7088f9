"""What every view of a run says first: where it comes from, the evaluations by status, the
commonest failures and the best individuals. ``atoll report`` (its text and its HTML page) and
``atoll inspect`` take it from here."""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from atoll.individual import Status
from atoll.record import plain
from atoll.record.paths import RunPaths, job_of
from atoll.record.reader import RunData
from atoll.views.facts import (
    best_epochs,
    failure_reasons,
    ranked,
    shown_metrics,
    usable,
    value_name,
    values,
)


@dataclass(frozen=True)
class Table:
    """A small table for people: column names and rows of plain Python values."""

    columns: list[str]
    rows: list[list[Any]]


@dataclass(frozen=True)
class Summary:
    """What every output of the report shows: counts, failure reasons, the best individuals."""

    run_dir: str
    about: str
    counts: dict[str, int]
    reasons: list[tuple[str, int]]
    top: Table
    ok: int
    notes: list[str] = field(default_factory=list)


def summarize(run: RunData, top: int) -> Summary:
    ind = run.individuals
    ok = int(np.count_nonzero(usable(ind)))
    return Summary(run_dir=str(run.metadata.get("run_dir", "?")), about=_about(run),
                   counts=status_counts(ind),
                   reasons=failure_reasons(ind), top=top_table(run, top), ok=ok,
                   notes=notes(run))


def _about(run: RunData) -> str:
    """Where the run comes from: versions, creation time, jobs, which files were read."""
    meta = run.metadata
    bits = [f"record schema {meta.get('schema_version', '?')}"]
    if "atoll_version" in meta:
        bits.append(f"atoll {meta['atoll_version']}")
    if "created" in meta and math.isfinite(float(meta["created"])):
        bits.append("created " + time.strftime("%Y-%m-%d %H:%M:%S",
                                               time.localtime(float(meta["created"]))))
    bits.append(f"{len(run.jobs)} job{'' if len(run.jobs) == 1 else 's'}")
    bits.append("read from results.h5" if meta.get("source") == "results" else
                "read from the worker files")
    return ", ".join(bits)


def notes(run: RunData) -> list[str]:
    """What a reader should know before the numbers: unclosed worker files, paused
    individuals, damage."""
    meta = run.metadata
    notes = []
    unclosed = meta.get("unclosed_worker_files") or []
    if unclosed:
        why = ("a job is running or was killed (rows up to its last flush are shown)"
               if _newest_may_run(run, unclosed) else
               "their jobs were killed (rows up to each one's last flush are shown)")
        notes.append(f"{len(unclosed)} of {len(meta.get('worker_files', []))} worker files not "
                     f"closed: {why}")
    lost = _paused_without_checkpoint(run)
    paused = int(np.count_nonzero(run.individuals["status"] == int(Status.PAUSED))) - lost
    if paused:
        notes.append(f"{paused} individual{'s are' if paused > 1 else ' is'} paused at a rung "
                     "(pruning.rule = 'asha'), waiting for promotion: not counted in the "
                     "budget, which they spend once promoted and finished; they stay paused "
                     "when the budget is spent")
    if lost:
        notes.append(f"{lost} paused individual{'s have' if lost > 1 else ' has'} no checkpoint "
                     "any more (deleted from RUN_DIR/checkpoints): a resume cannot promote "
                     f"{'them' if lost > 1 else 'it'}, and the record keeps "
                     f"{'them' if lost > 1 else 'it'} as paused")
    if "warning" in meta:
        notes.append(f"Warning: {meta['warning']}")
    return notes


def _paused_without_checkpoint(run: RunData) -> int:
    """How many paused individuals have lost their checkpoint (a user deleted
    ``RUN_DIR/checkpoints`` to free room): a resume cannot promote them. Listed here, for the
    notes, rather than at every read of a run (the progress watcher reads it every interval)."""
    ind = run.individuals
    paused = ind["id"][ind["status"] == int(Status.PAUSED)]
    if not len(paused) or run.metadata.get("source") != "workers":
        return 0
    kept = RunPaths(run.metadata["run_dir"]).checkpoint_files()
    return sum(int(ident) not in kept for ident in paused)


def _newest_may_run(run: RunData, unclosed: list[str]) -> bool:
    """Whether some of the ``unclosed`` worker files are the newest job's and it recorded no
    end: only that job may still be running; an earlier one without an end was killed."""
    if not len(run.jobs):
        return True  # run.h5 is gone: nothing tells
    newest = run.jobs[np.argmax(run.jobs["job"])]
    return (not math.isfinite(float(newest["stop"]))
            and any(job_of(path) == int(newest["job"]) for path in unclosed))


# -- counts and failures ---------------------------------------------------------------------
def status_counts(ind: np.ndarray) -> dict[str, int]:
    return {s.name.lower(): int(np.count_nonzero(ind["status"] == int(s))) for s in Status}


# -- the best individuals --------------------------------------------------------------------
def top_table(run: RunData, top: int) -> Table:
    """The best ``top`` individuals: loss, best epoch's metrics, epochs run, duration (all the
    parts of its evaluation), island, parameters."""
    metrics = shown_metrics(run)
    best = best_epochs(run)
    counts = Counter(int(i) for i in run.epochs["individual"])
    columns = ["id", value_name(run), *metrics]
    if len(run.epochs):
        columns += ["best epoch", "epochs"]
    columns += ["duration (s)", "island", *run.space.names]
    rows = []
    for row in ranked(run, top):
        ident = int(row["id"])
        epoch = best.get(ident)
        cells: list[Any] = [ident, float(values(run, row["loss"]))]
        cells += [float(epoch[m]) if epoch is not None else math.nan for m in metrics]
        if len(run.epochs):
            cells += [int(epoch["epoch"]) if epoch is not None else "", counts.get(ident, 0)]
        cells += [float(row["eval_seconds"]), int(row["island"])]
        cells += [plain(row[n]) for n in run.space.names]
        rows.append(cells)
    return Table(columns, rows)


# -- text --------------------------------------------------------------------------------------
def cell(value: Any) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def format_table(table: Table, indent: str = "  ") -> list[str]:
    """Right-aligned columns, one line per row."""
    texts = [[cell(v) for v in row] for row in table.rows]
    widths = [max([len(c), *(len(r[i]) for r in texts)]) for i, c in enumerate(table.columns)]
    lines = [indent + "  ".join(c.rjust(w) for c, w in zip(table.columns, widths, strict=True))]
    lines += [indent + "  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True))
              for r in texts]
    return lines


def counts_line(summary: Summary) -> str:
    total = sum(summary.counts.values())
    parts = ", ".join(f"{name} {n}" for name, n in summary.counts.items())
    return f"Evaluations: {total} ({parts})"


def text(summary: Summary) -> str:
    """The summary as terminal text."""
    lines = [f"Report of {summary.run_dir} ({summary.about})", counts_line(summary),
             *summary.notes]
    if summary.reasons:
        lines.append("Most common failure reasons:")
        lines += [f"  {n:6d}  {_short(text)}" for text, n in summary.reasons]
    if summary.top.rows:
        lines.append(f"Best {len(summary.top.rows)} of {summary.ok} ok:")
        lines += format_table(summary.top)
    else:
        lines.append("Best: none yet (no individual finished with a finite loss)")
    return "\n".join(lines)


def _short(text: str, width: int = 100) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


