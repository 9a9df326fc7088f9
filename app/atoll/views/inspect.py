"""The text ``atoll inspect RUN_DIR`` prints: metadata, counts by status, the best individuals."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import numpy as np

from atoll.individual import Status
from atoll.record.reader import RunData
from atoll.record.schema import MODE_NAMES


def describe(run: RunData, top: int = 10) -> str:
    lines = [_header(run)]
    lines += _jobs(run.jobs)
    lines += _counts(run)
    lines += _best(run, top)
    return "\n".join(lines)


def _header(run: RunData) -> str:
    meta = run.metadata
    bits = [f"record schema {meta.get('schema_version', '?')}"]
    if "atoll_version" in meta:
        bits.append(f"atoll {meta['atoll_version']}")
    if "created" in meta:
        bits.append(f"created {_when(meta['created'])}")
    line = f"Run {meta.get('run_dir', '?')} ({', '.join(bits)})"
    if meta.get("source") == "results":
        line += "\nRead from results.h5 (no worker files)"
    unclosed = meta.get("unclosed_worker_files") or []
    if unclosed:
        line += (f"\n{len(unclosed)} of {len(meta.get('worker_files', []))} worker files not "
                 "closed: a job is running or was killed (rows up to its last flush are kept)")
    if "warning" in meta:
        line += f"\nWarning: {meta['warning']}"
    return line


def _jobs(jobs: np.ndarray) -> list[str]:
    lines = [f"Jobs: {len(jobs)}"]
    for row in jobs:
        start, stop = float(row["start"]), float(row["stop"])
        if math.isfinite(stop):
            end = f"{_when(stop)} ({_duration(stop - start)}), exit {int(row['exit_code'])}"
        else:
            end = "running or killed"
        layout = " ".join(f"{k}={v}" for k, v in _json(row["layout"]).items())
        hosts = ",".join(_json(row["hosts"]))
        slurm = " ".join(f"{k}={v}" for k, v in _json(row["slurm"]).items())
        line = f"  job {int(row['job'])}: {_when(start)} -> {end}; {layout}; hosts {hosts}"
        lines.append(line + (f"; slurm {slurm}" if slurm else ""))
    return lines


def _counts(run: RunData) -> list[str]:
    status = run.individuals["status"]
    counts = ", ".join(f"{s.name.lower()} {int(np.count_nonzero(status == s))}" for s in Status)
    modes = run.migrations["mode"]
    moved = int(np.count_nonzero(modes == MODE_NAMES["migration"]))
    pollinated = int(np.count_nonzero(modes == MODE_NAMES["pollination"]))
    return [f"Evaluations: {len(status)} ({counts})",
            f"Epochs: {len(run.epochs)}; migrations: {moved}; pollinations: {pollinated}"]


def _best(run: RunData, top: int) -> list[str]:
    ind = run.individuals
    ok = ind[(ind["status"] == Status.OK) & np.isfinite(ind["loss"])]
    if not len(ok) or top <= 0:
        return ["Best: none yet (no individual finished with a finite loss)"]
    best = ok[np.argsort(ok["loss"], kind="stable")[:top]]
    names = ["id", "loss", "island", "worker", *run.space.names]
    rows = [[_cell(row[n]) for n in names] for row in best]
    widths = [max(len(n), *(len(r[i]) for r in rows)) for i, n in enumerate(names)]
    out = [f"Best {len(best)} of {len(ok)} ok:",
           "  " + "  ".join(n.rjust(w) for n, w in zip(names, widths, strict=True))]
    out += ["  " + "  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return out


def _cell(value: Any) -> str:
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.6g}"
    if isinstance(value, bytes):
        return value.decode()
    return str(value.item() if isinstance(value, np.generic) else value)


def _json(value: Any) -> Any:
    try:
        return json.loads(value.decode() if isinstance(value, bytes) else value)
    except (TypeError, ValueError):
        return {}


def _when(seconds: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(seconds)))
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"
