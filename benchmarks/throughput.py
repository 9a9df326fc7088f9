"""1. Throughput and optimizer overhead per evaluation at 4 ranks, 2 islands.

overhead per evaluation = (workers x wall - time inside the objective) / evaluations, with wall
from just before the search loop to its end, measured inside the processes on both sides.
Propulate's overhead grows with the number of evaluations (it pickles the whole island
population every generation and rescans it to breed), so the two sides are compared at equal
budgets; Atoll alone also runs a longer search to show its overhead does not grow.
"""

from __future__ import annotations

from typing import Any

from common import MIGRATION_PROBABILITY, Row, fmt, launch

RANKS = 4
ISLANDS = 2
REPEATS = 3
# (label, seconds per evaluation, evaluations per worker on both sides)
CASES = [("0 ms", 0.0, 100), ("0 ms", 0.0, 500), ("10 ms", 0.01, 100)]
ATOLL_ONLY = ("0 ms", 0.0, 2000)
TARGET_MS = 0.25
TARGET_FACTOR = 10.0


def task(sleep: float, per_worker: int, seed: int, *, ranks: int = RANKS,
         islands: int = ISLANDS, function: str = "sphere") -> dict[str, Any]:
    """One search, in the form every side reads (see atoll_side.py, propulate_side.py)."""
    island_workers = ranks // islands
    return {
        "function": function, "seed": seed, "sleep": sleep, "evals_per_worker": per_worker,
        "islands": islands, "migration_probability": MIGRATION_PROBABILITY,
        # Propulate divides its island migration probability by the island's workers; this
        # gives the same per-worker rate as Atoll's where it fits into [0, 1].
        "propulate_migration": min(1.0, MIGRATION_PROBABILITY * island_workers),
        "pop_size": 2 * island_workers,  # Atoll's default: 2 x the workers of an island
    }


def overhead(result: dict[str, Any]) -> float:
    """Seconds of optimizer overhead per evaluation."""
    return (result["ranks"] * result["wall"] - result["objective_seconds"]) / \
        result["evaluations"]


def _measure(side: str, sleep: float, per_worker: int, seed: int) -> dict[str, Any]:
    result = launch(side, RANKS, [task(sleep, per_worker, seed)]).results[0]
    expected = RANKS * per_worker
    if result["evaluations"] != expected:
        raise RuntimeError(f"{side}: {result['evaluations']} evaluations, expected {expected}")
    if side == "atoll" and result["recorded"] != expected:
        raise RuntimeError(f"atoll recorded {result.get('recorded')} of {expected} individuals")
    return result


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    notes: list[str] = []
    for label, sleep, per_worker in CASES:
        got: dict[str, list[dict[str, Any]]] = {"atoll": [], "propulate": [], "control": []}
        for rep in range(REPEATS):  # interleaved, so that a noisy moment hits both sides
            for side in got:
                got[side].append(_measure(side, sleep, per_worker, seed=rep + 1))
        a, p, c = (min(overhead(r) for r in got[side]) for side in got)
        rate_a = max(r["evaluations"] / r["wall"] for r in got["atoll"])
        rate_p = max(r["evaluations"] / r["wall"] for r in got["propulate"])
        where = f"{label} objective, {RANKS} ranks, {ISLANDS} islands, {per_worker}/worker"
        ok = a <= TARGET_MS / 1e3 and a * TARGET_FACTOR <= p
        rows.append(Row(f"overhead per evaluation, {where} (best of {REPEATS})",
                        f"{a * 1e3:.3f} ms", f"{p * 1e3:.3f} ms / control {c * 1e3:.3f} ms",
                        f"{a / p:.3f}",
                        f"<= {TARGET_MS} ms and <= 0.1 x Propulate", ok))
        rows.append(Row(f"throughput, {where} (best of {REPEATS})", f"{rate_a:.0f} /s",
                        f"{rate_p:.0f} /s", f"{rate_a / rate_p:.2f}"))
        runs = "; ".join(f"{side} {', '.join(fmt(overhead(r) * 1e3) for r in got[side])} ms"
                         for side in got)
        log(f"  {where}: overhead {runs}")
        notes.append(f"overhead {where}: {runs}")
    label, sleep, per_worker = ATOLL_ONLY
    runs = [_measure("atoll", sleep, per_worker, seed=rep + 1) for rep in range(REPEATS)]
    a = min(overhead(r) for r in runs)
    where = f"{label} objective, {RANKS} ranks, {ISLANDS} islands, {per_worker}/worker"
    rows.append(Row(f"overhead per evaluation, {where} (Atoll only, best of {REPEATS})",
                    f"{a * 1e3:.3f} ms", "not run (too slow)", "-", f"<= {TARGET_MS} ms",
                    a <= TARGET_MS / 1e3))
    rate = max(r["evaluations"] / r["wall"] for r in runs)
    rows.append(Row(f"throughput, {where} (Atoll only, best of {REPEATS})", f"{rate:.0f} /s"))
    log(f"  {where}: overhead atoll {', '.join(fmt(overhead(r) * 1e3) for r in runs)} ms")
    notes.append(f"overhead {where}: atoll {', '.join(fmt(overhead(r) * 1e3) for r in runs)} ms")
    return rows, notes
