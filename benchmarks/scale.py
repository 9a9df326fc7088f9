"""2. Worker utilisation at 8, 16 and 32 ranks with 100 ms sleeping evaluations.

utilisation = (time inside the objective) / (ranks x wall), 2 islands on both optimizers; the
control is a plain mpi4py loop calling the same objective as often (control_side.py). Each size
runs REPEATS times per side, interleaved; the best utilisation counts.
"""

from __future__ import annotations

from typing import Any

from common import Row, launch
from throughput import task

RANKS = (8, 16, 32)
SLEEP = 0.1
PER_WORKER = 25
ISLANDS = 2
REPEATS = 2
TARGET = 0.95  # Atoll at 32 ranks
SIDES = ("atoll", "propulate", "control")


def utilisation(result: dict[str, Any]) -> float:
    return result["objective_seconds"] / (result["ranks"] * result["wall"])


def _measure(side: str, ranks: int, seed: int) -> dict[str, Any]:
    result = launch(side, ranks, [task(SLEEP, PER_WORKER, seed, ranks=ranks,
                                       islands=ISLANDS)]).results[0]
    if result["evaluations"] != ranks * PER_WORKER:
        raise RuntimeError(f"{side} at {ranks} ranks: {result['evaluations']} evaluations, "
                           f"expected {ranks * PER_WORKER}")
    if side == "atoll" and result["recorded"] != ranks * PER_WORKER:
        raise RuntimeError(f"atoll at {ranks} ranks recorded {result['recorded']} individuals")
    return result


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    notes: list[str] = []
    for ranks in RANKS:
        got: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
        for rep in range(REPEATS):
            for side in SIDES:
                got[side].append(_measure(side, ranks, seed=rep + 1))
        u = {side: max(utilisation(r) for r in runs) for side, runs in got.items()}
        runs = "; ".join(f"{side} " + ", ".join(f"{utilisation(r):.3f} ({r['wall']:.2f} s)"
                                                for r in got[side]) for side in SIDES)
        log(f"  {ranks} ranks: utilisation (wall) {runs}")
        notes.append(f"utilisation (wall) at {ranks} ranks, {PER_WORKER} x {SLEEP * 1e3:.0f} ms "
                     f"per worker: {runs}")
        target = ranks == RANKS[-1]
        rows.append(Row(
            f"worker utilisation, {ranks} ranks, {ISLANDS} islands, {SLEEP * 1e3:.0f} ms "
            f"objective, {PER_WORKER}/worker (best of {REPEATS})",
            f"{u['atoll']:.3f}", f"{u['propulate']:.3f} / control {u['control']:.3f}",
            f"{u['atoll'] / u['propulate']:.2f}", f">= {TARGET}" if target else "-",
            u["atoll"] >= TARGET if target else None))
    return rows, notes
