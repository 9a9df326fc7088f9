"""What each strategy costs the search itself: start-up and overhead per evaluation, apart.

Atoll's GA, CMA-ES and hybrid islands and Optuna's CMA-ES sampler, each on 4 ranks with a
zero-cost 10-d sphere:
- start-up: from starting mpirun to the first evaluation (the objective's first-call stamps, as
  in startup.py), with 5 evaluations per worker;
- overhead per evaluation: (workers x wall - objective time) / evaluations, at SHORT and at
  LONG evaluations per worker, so that a cost growing with the number of individuals shows.
The GA and the default again on the same sphere with its last INTS parameters integers, which
CMA-ES searches with margin. Best of REPEATS each, the contenders taking turns (a slow moment of
a shared machine then hits them all). Ratios are to the GA on the same space and to Optuna's
CMA-ES, from this run. Targets: no strategy's overhead grows by more than half from SHORT to LONG
evaluations per worker, and the default's (the hybrid, DEFAULT) is at most DEFAULT_COST x the
GA's on the same space at LONG (start-up apart).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from common import Row, ensure_optuna_venv, launch
from throughput import overhead, task

from objectives import STAMP_ENV

RANKS = 4
DIMENSIONS = 10
SHORT, LONG = 100, 400  # evaluations per worker
REPEATS = 3
GROWTH = 1.5
DEFAULT_COST = 2.0
INTS = 2  # of the DIMENSIONS parameters, in the rows on a space with integers
# name: (side, what the task adds)
CONTENDERS: dict[str, tuple[str, dict[str, Any]]] = {
    "Atoll GA": ("atoll", {"evolution": {"strategy": "ga"}}),
    "Atoll CMA-ES": ("atoll", {"evolution": {"strategy": "cmaes"}}),
    "Atoll hybrid (default)": ("atoll", {"evolution": {}}),
    "Optuna CMA-ES": ("optuna", {"sampler": "cmaes"}),
    # Most searches have integers (layers, widths): CMA-ES searches them with margin.
    f"Atoll GA, {INTS} ints": ("atoll", {"evolution": {"strategy": "ga"}, "ints": INTS}),
    f"Atoll hybrid (default), {INTS} ints": ("atoll", {"evolution": {}, "ints": INTS}),
}
DEFAULT = "Atoll hybrid (default)"
JUDGED = (DEFAULT, f"{DEFAULT}, {INTS} ints")
"""The default's rows, each held to the GA on its space."""


def _task(name: str, per_worker: int, seed: int) -> dict[str, Any]:
    side, extra = CONTENDERS[name]
    return {**task(0.0, per_worker, seed, ranks=RANKS, islands=1), "dims": DIMENSIONS, **extra}


def startup(name: str, seed: int) -> float:
    stamps = Path(tempfile.mkdtemp(prefix="bench-stamps-strategy-"))
    try:
        run = launch(CONTENDERS[name][0], RANKS, [_task(name, 5, seed)],
                     env={STAMP_ENV: str(stamps)})
        times = [float(p.read_text()) for p in stamps.iterdir()]
    finally:
        shutil.rmtree(stamps)
    return min(times) - run.popen_time


def per_evaluation(name: str, per_worker: int, seed: int) -> float:
    result = launch(CONTENDERS[name][0], RANKS, [_task(name, per_worker, seed)]).results[0]
    if result["evaluations"] != RANKS * per_worker:
        raise RuntimeError(f"{name}: {result['evaluations']} evaluations, expected "
                           f"{RANKS * per_worker}")
    return overhead(result)


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    ensure_optuna_venv()
    measured: dict[str, list[tuple[float, float, float]]] = {name: [] for name in CONTENDERS}
    for seed in range(1, REPEATS + 1):
        for name in CONTENDERS:
            measured[name].append((startup(name, seed), per_evaluation(name, SHORT, seed),
                                   per_evaluation(name, LONG, seed)))
    costs = {name: (min(m[0] for m in runs), min(m[1] for m in runs), min(m[2] for m in runs))
             for name, runs in measured.items()}
    for name, (start, short, long) in costs.items():
        log(f"  {name}: start-up {start:.2f} s, overhead {short * 1e3:.3f} / "
            f"{long * 1e3:.3f} ms at {SHORT} / {LONG} per worker")
    peer = costs["Optuna CMA-ES"]
    rows, notes = [], []
    for name, (start, short, long) in costs.items():
        ints = "ints" in CONTENDERS[name][1]
        ga = costs[f"Atoll GA, {INTS} ints" if ints else "Atoll GA"]  # on the same space
        grows = long / short
        cheap = name not in JUDGED or long <= DEFAULT_COST * ga[2]
        rows.append(Row(
            f"strategy costs, {name}, {RANKS} ranks, 0 ms {DIMENSIONS}-d sphere"
            + (f" (its last {INTS} parameters ints)" if ints else "")
            + ": start-up (mpirun "
            f"to first evaluation); overhead per evaluation at {SHORT} / {LONG} per worker "
            f"(best of {REPEATS}); ratio: to Atoll's GA on the same space / to Optuna's CMA-ES "
            f"(start-up; overhead at {LONG})",
            f"{start:.2f} s; {short * 1e3:.3f} / {long * 1e3:.3f} ms", "-",
            f"{start / ga[0]:.2g} / {start / peer[0]:.2g}; {long / ga[2]:.2g} / "
            f"{long / peer[2]:.2g}",
            f"overhead at {LONG} <= {GROWTH} x at {SHORT}" + (
                f"; <= {DEFAULT_COST:g} x the GA's" if name in JUDGED else ""),
            grows <= GROWTH and cheap))
        notes.append(f"strategy costs, {name}: start-up {start:.3f} s, overhead "
                     f"{short * 1e3:.4f} ms ({SHORT}/worker), {long * 1e3:.4f} ms ({LONG}/worker)")
    return rows, notes
