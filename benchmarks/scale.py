"""2. Worker utilisation at 8, 16 and 32 ranks with 100 ms sleeping evaluations.

utilisation = (time inside the objective) / (ranks x wall), 2 islands on both optimizers; the
control is a plain mpi4py loop calling the same objective as often (control_side.py).
"""

from __future__ import annotations

from typing import Any

from common import Row, launch
from throughput import task

RANKS = (8, 16, 32)
SLEEP = 0.1
PER_WORKER = 25
ISLANDS = 2
TARGET = 0.95  # Atoll at 32 ranks


def utilisation(result: dict[str, Any]) -> float:
    return result["objective_seconds"] / (result["ranks"] * result["wall"])


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    notes: list[str] = []
    for ranks in RANKS:
        got = {}
        for side in ("atoll", "propulate", "control"):
            result = launch(side, ranks, [task(SLEEP, PER_WORKER, seed=1, ranks=ranks,
                                               islands=ISLANDS)]).results[0]
            if result["evaluations"] != ranks * PER_WORKER:
                raise RuntimeError(f"{side} at {ranks} ranks: {result['evaluations']} "
                                   f"evaluations, expected {ranks * PER_WORKER}")
            got[side] = result
        u = {side: utilisation(r) for side, r in got.items()}
        walls = ", ".join(f"{side} {r['wall']:.2f} s" for side, r in got.items())
        log(f"  {ranks} ranks: utilisation {', '.join(f'{s} {v:.3f}' for s, v in u.items())}; "
            f"wall {walls}")
        notes.append(f"{ranks} ranks, {PER_WORKER} x {SLEEP * 1e3:.0f} ms per worker: utilisation "
                     f"{', '.join(f'{s} {v:.3f}' for s, v in u.items())}; wall {walls}")
        target = ranks == RANKS[-1]
        rows.append(Row(
            f"worker utilisation, {ranks} ranks, {ISLANDS} islands, {SLEEP * 1e3:.0f} ms "
            f"objective, {PER_WORKER}/worker",
            f"{u['atoll']:.3f}", f"{u['propulate']:.3f} / control {u['control']:.3f}",
            f"{u['atoll'] / u['propulate']:.2f}", f">= {TARGET}" if target else "-",
            u["atoll"] >= TARGET if target else None))
    return rows, notes
