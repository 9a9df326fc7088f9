"""3. Startup: from starting mpirun to the first evaluation, at 8 ranks.

The harness takes the time just before ``Popen``; the objective writes the time of its first
call in each process (objectives.py, STAMP_ENV); startup is the earliest stamp minus the first.
Both sides run the same tiny search (5 zero-cost evaluations per worker, 2 islands); the
control (python, numpy, mpi4py, MPI_Init, then the objective) shows the floor of this machine.
Every launch has the Open MPI tuning of ``common.MCA_TUNING`` (as ``make`` sets it); a second row
measures all three sides with Open MPI's defaults, to show what the tuning is worth.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from common import MCA_TUNING, Row, launch
from throughput import task

from objectives import STAMP_ENV

RANKS = 8
REPEATS = 3
TARGET = 1.5


def startup(side: str, seed: int, tuned: bool) -> float:
    stamps = Path(tempfile.mkdtemp(prefix=f"bench-stamps-{side}-"))
    run = launch(side, RANKS, [task(0.0, 5, seed, ranks=RANKS, islands=2)],
                 env={STAMP_ENV: str(stamps)}, tuned=tuned)
    times = [float(p.read_text()) for p in stamps.iterdir()]
    shutil.rmtree(stamps)
    if len(times) != RANKS:
        raise RuntimeError(f"{side}: {len(times)} of {RANKS} ranks evaluated anything")
    return min(times) - run.popen_time


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    rows, notes = [], []
    for tuned in (True, False):
        settings = ", ".join(f"{k}={v}" for k, v in MCA_TUNING.items()) if tuned \
            else "Open MPI defaults"
        got: dict[str, list[float]] = {"atoll": [], "propulate": [], "control": []}
        for rep in range(REPEATS):
            for side in got:
                got[side].append(startup(side, seed=rep + 1, tuned=tuned))
        a, p, c = (min(got[side]) for side in ("atoll", "propulate", "control"))
        runs = "; ".join(f"{side} {', '.join(f'{t:.2f}' for t in times)} s"
                         for side, times in got.items())
        log(f"  startup ({settings}): {runs}")
        name = f"startup, mpirun to first evaluation, {RANKS} ranks, {settings} (best of {REPEATS})"
        rows.append(Row(name, f"{a:.2f} s", f"{p:.2f} s / control {c:.2f} s", f"{a / p:.2f}",
                        f"< {TARGET} s" if tuned else "-", a < TARGET if tuned else None))
        notes.append(f"startup runs ({settings}): {runs}")
    return rows, notes
