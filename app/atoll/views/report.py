"""``atoll report``: what a run found, as tables, text, CSV/JSON exports, plots and one HTML page.

Reads the HDF5 files only (through :func:`atoll.record.open_run`): a finished run, a running one
or a killed one, on any machine with h5py and numpy; matplotlib only for the plots. Nothing here
imports MPI or torch. Each file is written whole or not at all: a full disk leaves the file an
earlier report wrote in place, never a truncated one.
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

from atoll.errors import RecordError
from atoll.individual import Status
from atoll.record import plain, written_whole
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

if TYPE_CHECKING:
    from atoll.views.plots import Plot

EXPORTED = ("individuals", "epochs")
"""The tables ``--csv`` and ``--json`` write, one file each."""

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
                   notes=_notes(run))


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


def _notes(run: RunData) -> list[str]:
    meta = run.metadata
    notes = []
    unclosed = meta.get("unclosed_worker_files") or []
    if unclosed:
        notes.append(f"{len(unclosed)} of {len(meta.get('worker_files', []))} worker files not "
                     "closed: a job is running or was killed (rows up to its last flush are "
                     "shown)")
    if "warning" in meta:
        notes.append(f"Warning: {meta['warning']}")
    return notes


# -- counts and failures ---------------------------------------------------------------------
def status_counts(ind: np.ndarray) -> dict[str, int]:
    return {s.name.lower(): int(np.count_nonzero(ind["status"] == int(s))) for s in Status}


# -- the best individuals --------------------------------------------------------------------
def top_table(run: RunData, top: int) -> Table:
    """The best ``top`` individuals: loss, best epoch's metrics, epochs run, duration, island,
    parameters."""
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
        cells += [float(row["finished"] - row["started"]), int(row["island"])]
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


def describe(summary: Summary) -> str:
    """The report as terminal text."""
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


# -- exports -----------------------------------------------------------------------------------
def columns(table: np.ndarray) -> dict[str, list[Any]]:
    """Each column as Python values, enum columns (status, origin, mode) as their names."""
    out: dict[str, list[Any]] = {}
    for name in table.dtype.names or ():
        enum = h5py.check_enum_dtype(table.dtype[name])
        if enum:
            names = {code: key for key, code in enum.items()}
            out[name] = [names.get(int(v), str(int(v))) for v in table[name]]
        else:
            out[name] = [plain(v) for v in table[name]]
    return out


def write_csv(table: np.ndarray, path: Path) -> None:
    """A header row of column names, then one row per table row; floats written with ``repr``
    so they read back exactly (``nan`` for a missing value)."""
    data = columns(table)
    with written_whole(path) as temp, open(temp, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(list(data))
        for row in zip(*data.values(), strict=True):
            writer.writerow([repr(v) if isinstance(v, float) else v for v in row])


def write_json(table: np.ndarray, path: Path) -> None:
    """A list of records (one object per row); NaN and infinities become null, as JSON has
    none."""
    data = columns(table)
    names = list(data)
    records = [{n: _json_value(v) for n, v in zip(names, row, strict=True)}
               for row in zip(*data.values(), strict=True)]
    with written_whole(path) as temp, open(temp, "w", encoding="utf-8") as handle:
        json.dump(records, handle, indent=1, allow_nan=False)
        handle.write("\n")


def _json_value(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


# -- the whole report --------------------------------------------------------------------------
@dataclass(frozen=True)
class Written:
    """What a report wrote, for the command's last lines."""

    out: Path
    files: list[Path]
    skipped: list[str]


def check_plotting() -> None:
    """Fail before anything is written when the plots cannot be drawn."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise RecordError("the plots need matplotlib, which is not installed: pip install "
                          "'atoll[report]' (or pip install matplotlib), or pass --no-plots "
                          "for the tables, CSV and JSON alone") from None


def out_dir(run: RunData, out: Path | None) -> Path:
    """``--out``, or ``RUN_DIR/report``; refused if it is a file."""
    target = out if out is not None else Path(run.metadata.get("run_dir", ".")) / "report"
    if target.exists() and not target.is_dir():
        raise RecordError(f"{target}: is a file, not a directory; give another --out")
    return target


def write_report(run: RunData, out: Path, *, top: int, csv_files: bool, json_files: bool,
                 plots: bool) -> tuple[Summary, Written]:
    """Write the exports asked for, the plots and ``report.html`` into ``out``."""
    summary = summarize(run, top)
    try:
        out.mkdir(parents=True, exist_ok=True)
        exports: list[Path] = []
        for name in EXPORTED:
            if csv_files:
                exports.append(out / f"{name}.csv")
                write_csv(getattr(run, name), exports[-1])
            if json_files:
                exports.append(out / f"{name}.json")
                write_json(getattr(run, name), exports[-1])
        figures: list[Plot] = []
        skipped: list[str] = []
        if plots:
            from atoll.views import plots as drawing

            figures, skipped = drawing.draw_all(run, out, top)
        from atoll.views.html import page

        html = out / "report.html"
        with written_whole(html) as temp:
            temp.write_text(page(summary, figures, skipped, exports), encoding="utf-8")
    except OSError as exc:
        raise RecordError(f"{out}: cannot write the report ({exc.strerror or exc}); give a "
                          "writable --out") from exc
    return summary, Written(out, [html, *exports, *(f.path for f in figures)], skipped)


def run_report(run_dir: Path, out: Path | None, *, top: int, csv_files: bool, json_files: bool,
               plots: bool) -> str:
    """``atoll report``: check everything that can fail before writing, write, say what."""
    from atoll.record.reader import open_run

    if not run_dir.exists():
        raise RecordError(f"{run_dir}: no such file or directory; give the directory of an "
                          "Atoll run (or its results.h5)")
    run = open_run(run_dir)
    if plots:
        check_plotting()
    target = out_dir(run, out)
    summary, written = write_report(run, target, top=top, csv_files=csv_files,
                                    json_files=json_files, plots=plots)
    lines = [describe(summary), f"Wrote {written.out}/: "
             + ", ".join(p.name for p in written.files)]
    lines += [f"Skipped: {note}" for note in written.skipped]
    return "\n".join(lines)
