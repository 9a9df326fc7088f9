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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

from atoll.errors import RecordError
from atoll.record import RunPaths, plain, written_whole
from atoll.record.reader import RunData
from atoll.views.summary import Summary, summarize, text

if TYPE_CHECKING:
    from atoll.views.plots import Plot

EXPORTED = ("individuals", "epochs")
"""The tables ``--csv`` and ``--json`` write, one file each."""

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
    target = out if out is not None else RunPaths(run.metadata.get("run_dir", ".")).report_dir
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

    run = open_run(run_dir)
    if plots:
        check_plotting()
    target = out_dir(run, out)
    summary, written = write_report(run, target, top=top, csv_files=csv_files,
                                    json_files=json_files, plots=plots)
    lines = [text(summary), f"Wrote {written.out}/: "
             + ", ".join(p.name for p in written.files)]
    lines += [f"Skipped: {note}" for note in written.skipped]
    return "\n".join(lines)
