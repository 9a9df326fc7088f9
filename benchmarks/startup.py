"""3. Startup: from starting mpirun to the first evaluation, at 8 ranks.

The harness takes the time just before ``Popen``; the objective writes the time of its first
call in each process (objectives.py, STAMP_ENV); startup is the earliest stamp minus the first.
Both sides run the same tiny search (5 zero-cost evaluations per worker, 2 islands).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from common import Row, launch
from throughput import task

from objectives import STAMP_ENV

RANKS = 8
REPEATS = 3
TARGET = 1.5


def startup(side: str, seed: int) -> float:
    stamps = Path(tempfile.mkdtemp(prefix=f"bench-stamps-{side}-"))
    run = launch(side, RANKS, [task(0.0, 5, seed, ranks=RANKS, islands=2)],
                 env={STAMP_ENV: str(stamps)})
    times = [float(p.read_text()) for p in stamps.iterdir()]
    if len(times) != RANKS:
        raise RuntimeError(f"{side}: {len(times)} of {RANKS} ranks evaluated anything")
    return min(times) - run.popen_time


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    got: dict[str, list[float]] = {"atoll": [], "propulate": []}
    for rep in range(REPEATS):
        for side in got:
            got[side].append(startup(side, seed=rep + 1))
    a, p = min(got["atoll"]), min(got["propulate"])
    log(f"  startup: Atoll {[round(t, 2) for t in got['atoll']]} s, "
        f"Propulate {[round(t, 2) for t in got['propulate']]} s")
    row = Row(f"startup, mpirun to first evaluation, {RANKS} ranks (best of {REPEATS})",
              f"{a:.2f} s", f"{p:.2f} s", f"{a / p:.2f}", f"< {TARGET} s", a < TARGET)
    note = (f"startup runs: Atoll {', '.join(f'{t:.2f}' for t in got['atoll'])} s; "
            f"Propulate {', '.join(f'{t:.2f}' for t in got['propulate'])} s")
    return [row], [note]
