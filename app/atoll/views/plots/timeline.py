"""Where the time went: one bar per evaluation on each worker; start-up, wind-down, idle and
failed time."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.colors import to_rgb
from matplotlib.patches import Patch

from atoll.individual import Status
from atoll.record.reader import RunData
from atoll.views.plots.common import STATUS_COLOURS, Plot, figure, run_start, save, time_unit

GAP_COLOUR = "0.88"
PHASES = {"start-up": ("#d9c8ea", "//", "start-up (job start to first evaluation)"),
          "wind-down": ("#d5e8d4", "..", "wind-down (last evaluation to job end)")}
"""Colour, hatch and legend text of the time around a worker's evaluations in a job."""
SPAN = np.dtype([("worker", "i4"), ("status", "i1"), ("started", "f8"), ("finished", "f8")])
Window = tuple[float, float, bool]
"""When a job ran (start, stop) and whether its stop was recorded (not killed, not running)."""


def timeline(run: RunData, out: Path, top: int) -> Plot | str:
    title = "Per-worker timeline"
    timed = _timed(run)
    if not len(timed):
        return f"{title} (no evaluation has start and end times)"
    t0 = run_start(run)
    end = _end(run, timed)
    windows = _job_windows(run, t0, end)
    divisor, unit = time_unit(end - t0)
    workers = np.unique(timed["worker"])
    fig = figure(12, min(1.8 + 0.42 * len(workers), 30))
    ax = fig.subplots()
    for row, worker in enumerate(workers):
        mine = timed[timed["worker"] == worker]
        _worker_row(ax, row, mine[np.argsort(mine["started"], kind="stable")], windows, t0,
                    divisor)
    gaps = list(zip([stop for _, stop, _ in windows[:-1]],
                    [start for start, _, _ in windows[1:]], strict=True))
    for stop, start in gaps:
        ax.axvspan((stop - t0) / divisor, (start - t0) / divisor, color=GAP_COLOUR, zorder=0)
    handles = _legend({Status(int(s)) for s in np.unique(timed["status"])}, bool(gaps))
    ax.set_yticks(range(len(workers)), [f"worker {int(w)}" for w in workers])
    ax.set_ylim(len(workers) - 0.5, -0.5)
    ax.set_xlim(0, (end - t0) / divisor)
    ax.set_xlabel(f"wall time since the run began ({unit})")
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles),
               fontsize="small", frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(f"{title}: one bar per evaluation; right: share of the time its jobs ran")
    return save(fig, out / "timeline.png", title,
                 "One bar per evaluation (one per part of an evaluation paused at a rung or "
                 "interrupted, then continued), coloured by how it ended. Hatched: start-up, from "
                 "the job's start to the worker's first evaluation (the objective's import, "
                 "the worker's set-up, the first breeding), and wind-down, from its last "
                 "evaluation to the end of a job that ended cleanly (the budget was handed out, "
                 "others finished theirs). White gaps are idle time. Right: each worker's "
                 "shares of the wall time of the jobs it worked in (time between jobs does not "
                 "count).")


def _worker_row(ax: Any, row: int, mine: np.ndarray, windows: list[Window], t0: float,
                divisor: float) -> None:
    """One worker's bars (its evaluations in the order they started), its start-up and
    wind-down, and its shares of the time on the right."""
    # Back-to-back evaluations of one status alternate two shades, so each bar shows.
    shade = np.arange(len(mine)) % 2 == 1
    for status, colour in STATUS_COLOURS.items():
        for alternate in (False, True):
            these = mine[(mine["status"] == int(status)) & (shade == alternate)]
            if len(these):
                spans = list(zip((these["started"] - t0) / divisor,
                                 (these["finished"] - these["started"]) / divisor, strict=True))
                tone = _lighter(colour) if alternate else colour
                ax.broken_barh(spans, (row - 0.35, 0.7), facecolors=tone, edgecolors=tone,
                               linewidth=0.4)
    for phase, spans in phase_spans(mine, windows).items():
        colour, hatch, _ = PHASES[phase]
        ax.broken_barh([((a - t0) / divisor, (b - a) / divisor) for a, b in spans],
                       (row - 0.35, 0.7), facecolors=colour, edgecolors="0.4", hatch=hatch,
                       linewidth=0.4)
    ax.text(1.01, row, _busy_text(shares(mine, windows)), transform=ax.get_yaxis_transform(),
            va="center", fontsize="small")


def _legend(present: set[Status], gaps: bool) -> list[Patch]:
    handles = [Patch(color=colour, label=status.name.lower())
               for status, colour in STATUS_COLOURS.items() if status in present]
    handles += [Patch(facecolor=colour, edgecolor="0.4", hatch=hatch, linewidth=0.4, label=text)
                for colour, hatch, text in PHASES.values()]
    handles.append(Patch(facecolor="white", edgecolor="black", linewidth=0.5,
                         label="idle (gap)"))
    if gaps:
        handles.append(Patch(color=GAP_COLOUR, label="no job running"))
    return handles


def worker_shares(run: RunData) -> dict[int, dict[str, float]]:
    """Worker -> its shares of the time of the jobs it worked in, as the plot says them."""
    timed = _timed(run)
    if not len(timed):
        return {}
    windows = _job_windows(run, run_start(run), _end(run, timed))
    return {int(w): shares(timed[timed["worker"] == w], windows)
            for w in np.unique(timed["worker"])}


def _timed(run: RunData) -> np.ndarray:
    """Every timed part of every evaluation, as (worker, status, started, finished): one
    paused at a rung or interrupted, then continued (maybe by another worker), has a bar per
    part on the worker that ran it."""
    spans = np.concatenate([_spans(run.individuals), _spans(run.parts)])
    return spans[np.isfinite(spans["started"]) & np.isfinite(spans["finished"])]


def _spans(rows: np.ndarray) -> np.ndarray:
    out = np.empty(len(rows), dtype=SPAN)
    for name in SPAN.names or ():
        out[name] = rows[name]
    return out


def _end(run: RunData, timed: np.ndarray) -> float:
    """The last recorded moment: the last job's stop or the last evaluation's end."""
    stops = [float(v) for v in run.jobs["stop"] if math.isfinite(v)]
    return max([float(timed["finished"].max()), *stops])


def phase_spans(mine: np.ndarray, windows: list[Window]) -> dict[str, list[tuple[float, float]]]:
    """For each job the worker evaluated in: its start-up, from the job's start to the worker's
    first evaluation, and, where the job's stop was recorded, its wind-down, from the end of
    its last evaluation to the job's stop."""
    spans: dict[str, list[tuple[float, float]]] = {phase: [] for phase in PHASES}
    for start, stop, ended in windows:
        inside = mine[(mine["started"] >= start) & (mine["started"] <= stop)]
        if len(inside):
            spans["start-up"].append((start, float(inside["started"].min())))
            if ended:
                spans["wind-down"].append((float(inside["finished"].max()), stop))
    return spans


def shares(mine: np.ndarray, windows: list[Window]) -> dict[str, float]:
    """The worker's busy, failed (a part of busy), start-up, wind-down and idle fractions of
    the wall time of the jobs it worked in; empty when that time is zero."""
    starts = mine["started"]
    span = sum(stop - start for start, stop, _ in windows
               if np.any((starts >= start) & (starts <= stop)))
    if span <= 0:
        return {}
    busy = float((mine["finished"] - mine["started"]).sum())
    failed = mine[mine["status"] == int(Status.FAILED)]
    part = {"busy": busy / span,
            "failed": float((failed["finished"] - failed["started"]).sum()) / span}
    for phase, spans in phase_spans(mine, windows).items():
        part[phase] = sum(max(b - a, 0.0) for a, b in spans) / span
    part["idle"] = max(1.0 - part["busy"] - part["start-up"] - part["wind-down"], 0.0)
    return part


def _busy_text(part: dict[str, float]) -> str:
    if not part:
        return ""
    failed = f" (failed {100 * part['failed']:.0f}%)" if part["failed"] > 0 else ""
    rest = ", ".join(f"{name} {100 * part[name]:.0f}%" for name in (*PHASES, "idle"))
    return f"busy {100 * part['busy']:.0f}%{failed}, {rest}"


def _lighter(colour: str) -> tuple[float, float, float]:
    red, green, blue = to_rgb(colour)
    return (red + (1 - red) * 0.35, green + (1 - green) * 0.35, blue + (1 - blue) * 0.35)


def _job_windows(run: RunData, t0: float, end: float) -> list[Window]:
    """When each job ran, in order: from its start to its stop, or for a job killed or still
    running, to its last evaluation before the next job (or ``end``)."""
    jobs = run.jobs[np.argsort(run.jobs["start"], kind="stable")]
    if not len(jobs):  # run.h5 is missing: one window over what was recorded
        return [(t0, end, False)]
    finished = _timed(run)["finished"]
    windows = []
    for index, job in enumerate(jobs):
        start, stop = float(job["start"]), float(job["stop"])
        ended = math.isfinite(stop)
        if not ended:
            limit = float(jobs["start"][index + 1]) if index + 1 < len(jobs) else math.inf
            mine = finished[np.isfinite(finished) & (finished >= start) & (finished < limit)]
            stop = float(mine.max()) if len(mine) else start
        windows.append((start, max(stop, start), ended))
    return windows
