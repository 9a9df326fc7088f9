"""5. The search logic without timing: Atoll's and Propulate's, each in one process.

The quality rows compare whole asynchronous searches, where what each worker knows when it
breeds depends on timing. This takes timing out (benchmarks/sequential_side.py), 400
evaluations, SEEDS seeds a side, population size 4 as in the quality rows:

- the default propagators alone: breed from everything evaluated so far, every function;
- the island model (4 workers, 2 islands, real migration as in the quality rows) in fixed
  schedules, on ISLAND_FUNCTIONS: workers take turns one evaluation at a time, or BURST at a
  time (what an oversubscribed core does to fast evaluations).

Deterministic for given seeds, so reports rather than targets.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from typing import Any

from common import ATOLL_PYTHON, HERE, PROPULATE_PYTHON, Row, mpi_env
from quality import better, p_worse

from objectives import FUNCTIONS

SEEDS = 200
EVALUATIONS = 400
POP_SIZE = 4
ISLAND_FUNCTIONS = ("schwefel",)  # where whole searches differed (see RESULTS.md, Quality)
BURST = 10


def _best(side: str, function: str, *schedule: str) -> list[float]:
    python = ATOLL_PYTHON if side == "atoll" else PROPULATE_PYTHON
    done = subprocess.run([str(python), str(HERE / "sequential_side.py"), side, function,
                           str(SEEDS), str(EVALUATIONS), str(POP_SIZE), *schedule],
                          capture_output=True, text=True, cwd=HERE, env=mpi_env(), check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{side} {function}: {done.stderr[-2000:]}")
    return [float(v) for v in json.loads(done.stdout)]


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    rows, notes = [], []
    cases = [(f"propagator alone, {f} {FUNCTIONS[f][3]}-d", f, ()) for f in FUNCTIONS] + [
        (f"island model alone, {f} {FUNCTIONS[f][3]}-d, {label}", f, (str(burst),))
        for f in ISLAND_FUNCTIONS
        for label, burst in (("workers take turns", 1),
                             (f"workers take turns of {BURST} evaluations", BURST))]
    for label, f, schedule in cases:
        a, p = _best("atoll", f, *schedule), _best("propulate", f, *schedule)
        share, p_value = better(a, p), p_worse(a, p)
        rows.append(Row(
            f"{label}: one process, no MPI, {EVALUATIONS} evaluations, median best loss over "
            f"{SEEDS} seeds; ratio: P(an Atoll run beats a Propulate run)",
            f"{statistics.median(a):.4g}", f"{statistics.median(p):.4g}", f"{share:.2f}",
            f"report (rank test p = {p_value:.2g})"))
        log(f"  {label}: P(Atoll better) {share:.3f}, p(Atoll worse) {p_value:.2g}")
        notes.append(f"{label}: P(Atoll better) {share:.3f}, p(Atoll worse) {p_value:.2g}")
    return rows, notes
