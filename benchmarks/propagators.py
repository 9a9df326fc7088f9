"""5. The default propagators alone: Atoll's and Propulate's in a plain sequential loop.

The quality rows compare whole asynchronous searches, where what each worker knows when it
breeds depends on timing. This takes timing out: one process, no MPI, each propagator breeds
from everything evaluated so far (population size 4, as in the quality rows; 400 evaluations;
SEEDS seeds a side). Deterministic for given seeds, so a report rather than a target.
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


def _best(side: str, function: str) -> list[float]:
    python = ATOLL_PYTHON if side == "atoll" else PROPULATE_PYTHON
    done = subprocess.run([str(python), str(HERE / "sequential_side.py"), side, function,
                           str(SEEDS), str(EVALUATIONS), str(POP_SIZE)], capture_output=True,
                          text=True, cwd=HERE, env=mpi_env(), check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{side} {function}: {done.stderr[-2000:]}")
    return [float(v) for v in json.loads(done.stdout)]


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    rows, notes = [], []
    for f in FUNCTIONS:
        a, p = _best("atoll", f), _best("propulate", f)
        share, p_value = better(a, p), p_worse(a, p)
        dims = FUNCTIONS[f][3]
        rows.append(Row(
            f"propagator alone, {f} {dims}-d: one process, no MPI, {EVALUATIONS} evaluations, "
            f"median best loss over {SEEDS} seeds; ratio: P(an Atoll run beats a Propulate run)",
            f"{statistics.median(a):.4g}", f"{statistics.median(p):.4g}", f"{share:.2f}",
            f"report (rank test p = {p_value:.2g})"))
        log(f"  {f}: P(Atoll better) {share:.3f}, p(Atoll worse) {p_value:.2g}")
        notes.append(f"propagator alone, {f}: P(Atoll better) {share:.3f}, "
                     f"p(Atoll worse) {p_value:.2g}")
    return rows, notes
