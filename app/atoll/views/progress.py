"""Progress of a running search, read from its files: what rank 0 prints while a search runs,
and what ``atoll watch`` shows from another shell.

Only flushed rows are read, without locks, so a reader never slows the search down or blocks
it. A job's end is its stop time in the jobs table; a watcher started by the search also ends
when the search's process does, and any watcher when no live job holds the run directory any
more (a killed job records no end).
"""

from __future__ import annotations

import math
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import numpy as np

from atoll.errors import RecordError, suggested
from atoll.exit_codes import ENDED
from atoll.individual import FINISHED, Status
from atoll.record import RunPaths, open_run, plain
from atoll.record.claim import held, running
from atoll.record.reader import RunData
from atoll.views.facts import best_epoch_values, main_metric, value_name, values
from atoll.views.inspect import duration, json_value

LIVE_REFRESH = 1.0  # seconds between redraws of the live view on a terminal


@dataclass(frozen=True)
class Snapshot:
    """Where a run stands, from what its files hold now."""

    job: int  # the newest job (-1: none yet)
    job_start: float
    job_stop: float  # NaN while it runs
    exit_code: int  # the newest job's, once it ended
    running: bool  # the newest job has not recorded its end
    budget: int
    completed: int  # evaluations that spend the budget, all jobs
    failed: int
    this_job: int  # evaluations that spend the budget, newest job
    metric: str
    pruned: int = 0  # stopped early by the pruning rule (counted in ``completed``)
    paused: int = 0  # waiting at a rung for promotion (asha; not counted)
    training: tuple[int, ...] = ()  # the last epoch reported by each evaluation under way
    objective: str = "loss"  # what the objective's result is called (facts.value_name)
    best: dict[str, Any] = field(default_factory=dict)  # id, objective, metric value, params
    new_rows: list[dict[str, Any]] = field(default_factory=list)  # for --each: since `seen`

    @property
    def rate(self) -> float:
        """Evaluations per second of the newest job, to its end or until now."""
        end = self.job_stop if math.isfinite(self.job_stop) else time.time()
        elapsed = end - self.job_start
        return self.this_job / elapsed if elapsed > 0 else 0.0

    @property
    def eta(self) -> float:
        left = max(self.budget - self.completed, 0)
        return left / self.rate if self.rate > 0 else math.inf


def take(run_dir: Path, seen: set[int] | None = None) -> Snapshot:
    """The run's state now; ``seen`` (ids already reported) is updated with the new rows."""
    run = open_run(run_dir)
    ind, jobs = run.individuals, run.jobs
    job = int(jobs["job"][-1]) if len(jobs) else -1
    start = float(jobs["start"][-1]) if len(jobs) else time.time()
    stop = float(jobs["stop"][-1]) if len(jobs) else math.nan
    exit_code = int(jobs["exit_code"][-1]) if len(jobs) else 0
    workers = int(json_value(jobs["layout"][-1]).get("workers", 0)) if len(jobs) else 0
    counted = np.isin(ind["status"], FINISHED)
    metric = main_metric(run)
    ok = ind[(ind["status"] == Status.OK) & np.isfinite(ind["loss"])]
    best: dict[str, Any] = {}
    if len(ok):
        row = ok[int(np.argmin(ok["loss"]))]
        value = best_epoch_values(run, [int(row["id"])], metric)[0] if metric else math.nan
        best = {"id": int(row["id"]), "objective": float(values(run, row["loss"])),
                "value": value,
                "params": {name: plain(row[name]) for name in run.space.names}}
    new_rows = []
    if seen is not None:
        for row in ind[~np.isin(ind["id"], list(seen))] if seen else ind:
            seen.add(int(row["id"]))
            status = Status(int(row["status"])).name.lower()
            new_rows.append({"id": int(row["id"]), "status": status,
                             "objective": float(values(run, row["loss"])),
                             "worker": int(row["worker"]), "error": plain(row["error"])})
    return Snapshot(
        job=job, job_start=start, job_stop=stop, exit_code=exit_code,
        running=bool(len(jobs)) and not math.isfinite(stop),
        budget=int(run.metadata.get("budget") or 0), completed=int(np.count_nonzero(counted)),
        failed=int(np.count_nonzero(ind["status"] == Status.FAILED)),
        # what ended in this job, bred in it or earlier (continued, promoted)
        this_job=int(np.count_nonzero(counted & (ind["finished"] >= start))),
        metric=metric, pruned=int(np.count_nonzero(ind["status"] == Status.PRUNED)),
        paused=int(np.count_nonzero(ind["status"] == Status.PAUSED)),
        training=_training(run, start, workers) if len(jobs) and not math.isfinite(stop)
        else (),
        objective=value_name(run), best=best, new_rows=new_rows)


def _training(run: RunData, since: float, workers: int = 0) -> tuple[int, ...]:
    """The last epoch each evaluation under way reported (its epochs reach the files as it
    trains): epochs of this job newer than their individual's last recorded part, if any; of
    those, the ``workers`` (the job's) that reported last (an evaluation that ended shows so
    until its row is flushed, while its worker already trains the next)."""
    ind, epochs = run.individuals, run.epochs
    ended = np.full(len(epochs), -np.inf)  # when each epoch's individual's last part ended
    if len(ind):
        order = np.argsort(ind["id"])
        ids = ind["id"][order]
        at = np.minimum(np.searchsorted(ids, epochs["individual"]), len(ids) - 1)
        known = ids[at] == epochs["individual"]
        ended[known] = ind["finished"][order][at[known]]
    ahead = epochs[(epochs["time"] >= since) & (epochs["time"] > ended)]
    if not len(ahead):
        return ()
    ahead = ahead[np.lexsort((ahead["epoch"], ahead["individual"]))]
    last = ahead[np.flatnonzero(np.append(np.diff(ahead["individual"]) != 0, True))]
    if workers:
        last = last[np.argsort(-last["time"], kind="stable")[:workers]]
    return tuple(sorted(last["epoch"].tolist()))


def line(snap: Snapshot) -> str:
    """One plain line (no control characters), for log files and pipes."""
    share = f" ({100 * snap.completed / snap.budget:.0f}%)" if snap.budget else ""
    parts = [f"{snap.completed} of {snap.budget} done{share}", f"{snap.rate:.2f}/s",
             f"{snap.failed} failed",
             *(f"{count} {what}{detail}" for what, count, detail in _beyond_done(snap))]
    if snap.best:
        parts.append(f"best {_best(snap)}")
    if snap.running:
        parts.append(f"ETA {duration(snap.eta)}")
    else:
        parts.append(ended(snap) if snap.job >= 0 else "waiting for the job to start")
    return "[atoll] " + ", ".join(parts)


def ended(snap: Snapshot) -> str:
    """The end of the newest job, and what to do if it did not end done."""
    how = ENDED.get(snap.exit_code)
    return f"job ended: {how}" if how else "job ended"


def individual_line(row: dict[str, Any], objective: str = "loss") -> str:
    """One finished individual (``-v``); ``objective`` names its result (loss or value)."""
    text = f"[atoll] individual {row['id']} (worker {row['worker']}): {row['status']}"
    if row["status"] == "ok":
        return text + f", {objective} {row['objective']:.6g}"
    return text + (f": {row['error']}" if row["error"] else "")


class _Final(Exception):
    """SIGTERM from the search that started this watcher: its job has ended."""


def _final(signum: int, frame: FrameType | None) -> None:
    raise _Final


def follow(run_dir: Path, *, interval: float, live: bool, each: bool = False,
           after: float = 0.0, parent: int = 0, wait: bool = False,
           out: TextIO = sys.stdout) -> Snapshot | None:
    """Report progress until the job ends (the first one starting at or after ``after``), or
    until process ``parent`` is gone. ``live``: a live table on a terminal, else plain lines
    every ``interval`` seconds. A watcher started by a search (``parent``) prints its last line
    at once when the search sends SIGTERM at its end. ``wait``: a run directory that is no run
    yet (a job still pending) is waited for, with a line saying so, instead of an error."""
    if parent:
        signal.signal(signal.SIGTERM, _final)
    if wait and not RunPaths(run_dir).run_file.exists() and not run_dir.is_file():
        print(f"[atoll] waiting for {run_dir} to become an Atoll run (its job has not begun "
              "yet); Ctrl-C to stop", file=out, flush=True)
        while not RunPaths(run_dir).run_file.exists():
            time.sleep(LIVE_REFRESH)
    seen: set[int] | None = set() if each else None
    if seen is not None and after:
        seen.update(_ids_before(run_dir, after))
    show: Callable[[Snapshot], None]
    stop_live: Callable[[], None] = lambda: None  # noqa: E731
    if live:
        show, stop_live = _live_view(out)
    else:
        def show(snap: Snapshot) -> None:
            for row in snap.new_rows:
                print(individual_line(row, snap.objective), file=out)
            print(line(snap), file=out, flush=True)
    try:
        if parent:  # its search blocked SIGTERM for it (atoll.watcher.start_watcher)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        while True:
            snap = _take_when_readable(run_dir, seen, bool(after))
            started = snap is not None and snap.job >= 0 and snap.job_start >= after
            if snap is not None and (started or not after):
                show(snap)
                if not snap.running and (snap.job >= 0 or not wait):  # waits for a first job
                    return snap
            if parent and not running(parent):
                return snap
            if snap is not None and snap.running and not parent and not held(run_dir):
                snap = _take_when_readable(run_dir, seen, bool(after))  # an end just recorded?
                if snap is not None and snap.running:
                    stop_live()
                    print(f"[atoll] job {snap.job} ended without recording its end (killed?); "
                          f"{suggested('atoll', 'resume', run_dir)} continues the run", file=out,
                          flush=True)
                    return snap
            time.sleep(LIVE_REFRESH if live else interval)
    except _Final:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        snap = _take_when_readable(run_dir, seen, bool(after))
        if snap is not None and snap.job >= 0 and snap.job_start >= after:
            show(snap)
        return snap
    finally:
        stop_live()


def _take_when_readable(run_dir: Path, seen: set[int] | None, waiting: bool
                        ) -> Snapshot | None:
    """A snapshot, or None when ``waiting``: a watcher started by a search never reports a
    problem with the run's files (the search itself does, once) and waits for them instead;
    a watcher of its own raises at once."""
    try:
        return take(run_dir, seen)
    except RecordError:
        if not waiting:
            raise
        return None


def _ids_before(run_dir: Path, after: float) -> set[int]:
    try:
        ind = open_run(run_dir).individuals
    except RecordError:
        return set()
    return set(ind["id"][ind["born"] < after].tolist())


def _live_view(out: TextIO) -> tuple[Callable[[Snapshot], None], Callable[[], None]]:
    """A table redrawn in place (rich), for a terminal."""
    from rich.console import Console
    from rich.live import Live
    from rich.table import Table

    live = Live(console=Console(file=out), auto_refresh=False, transient=False)
    live.start()

    def show(snap: Snapshot) -> None:
        for row in snap.new_rows:  # -v: above the table, which stays at the bottom
            live.console.print(individual_line(row, snap.objective), markup=False,
                               highlight=False)
        table = Table(title=f"Atoll: job {snap.job}", show_header=False, box=None)
        table.add_row("done", f"{snap.completed} of {snap.budget}")
        table.add_row("rate", f"{snap.rate:.2f} evaluations/s")
        table.add_row("failed", str(snap.failed))
        for what, count, detail in _beyond_done(snap):
            table.add_row(what, f"{count}{detail}")
        table.add_row("best", _best(snap) if snap.best else "none yet")
        table.add_row("ETA", duration(snap.eta) if snap.running else ended(snap))
        live.update(table, refresh=True)

    return show, live.stop


def _beyond_done(snap: Snapshot) -> list[tuple[str, int, str]]:
    """(what, how many, detail): what the pruning rule did so far, when it did anything (a
    search under ``asha`` can be busy for long with evaluations that pause at a rung and spend
    no budget), and the evaluations under way with the epochs they reached (a long training
    shows its progress before its first result)."""
    found = [(what, count, "") for what, count in (("pruned", snap.pruned),
                                                   ("paused", snap.paused)) if count]
    if snap.training:
        low, high = snap.training[0], snap.training[-1]
        reached = f"epoch {low}" if low == high else f"epochs {low}-{high}"
        found.append(("training", len(snap.training), f" (at {reached})"))
    return found


def _best(snap: Snapshot) -> str:
    best = snap.best
    text = f"{snap.objective} {best['objective']:.6g}"
    if snap.metric and math.isfinite(best["value"]):
        text += f" {snap.metric} {best['value']:.4g}"
    params = " ".join(f"{k}={_short(v)}" for k, v in best["params"].items())
    return f"{text} (id {best['id']}: {params})"


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
