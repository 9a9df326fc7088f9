"""1. Throughput and optimizer overhead per evaluation at 4 ranks, 2 islands.

overhead per evaluation = (workers x wall - time inside the objective) / evaluations, with wall
from just before the search loop to its end, measured inside the processes on both sides.
For Atoll the record also gives the loop's own share: the median time from the end of one
evaluation to the start of the same worker's next. And one machine row shows why that share
grows with a sleeping objective: the same breeding step, in one process, warm and right after
a 10 ms sleep.
Propulate's overhead grows with the number of evaluations (it pickles the whole island
population every generation and rescans it to breed), so the two sides are compared at equal
budgets; Atoll alone also runs a longer search to show its overhead does not grow.

The verdict is the issue's 10x against Propulate measured in the same run, not its 0.25 ms in
absolute terms: see "Overhead target" in run.py's SETUP for why.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from common import MIGRATION_PROBABILITY, Row, fmt, launch

RANKS = 4
ISLANDS = 2
REPEATS = 5  # on a loaded host the best of 3 of one case varied 2x from one run to the next
# (label, seconds per evaluation, evaluations per worker on both sides)
CASES = [("0 ms", 0.0, 100), ("0 ms", 0.0, 500), ("10 ms", 0.01, 100)]
ATOLL_ONLY = ("0 ms", 0.0, 2000)
ISSUE_MS = 0.25  # the issue's figure: 0.1 x the 2.5 ms Propulate measured then
TARGET_FACTOR = 10.0  # the verdict: at least this much less overhead than Propulate, same run
TARGET = f"<= 0.1 x Propulate in this run (issue: 10x less, about {ISSUE_MS} ms)"


def task(sleep: float, per_worker: int, seed: int, *, ranks: int = RANKS,
         islands: int = ISLANDS, function: str = "sphere") -> dict[str, Any]:
    """One search, in the form every side reads (see atoll_side.py, propulate_side.py).

    Atoll runs its GA (``evolution.strategy = "ga"``), Propulate's algorithm, so that these rows
    compare two implementations of one search; the peers and strategy-cost rows set their own
    ``evolution`` table (the default, the hybrid, among them)."""
    island_workers = ranks // islands
    return {
        "function": function, "seed": seed, "sleep": sleep, "evals_per_worker": per_worker,
        "islands": islands, "migration_probability": MIGRATION_PROBABILITY,
        # Propulate divides its island migration probability by the island's workers; this
        # gives the same per-worker rate as Atoll's where it fits into [0, 1].
        "propulate_migration": min(1.0, MIGRATION_PROBABILITY * island_workers),
        "pop_size": 2 * island_workers,  # Atoll's default: 2 x the workers of an island
        "evolution": {"strategy": "ga"},
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
    propulate_best: dict[int, float] = {}  # per-worker budget -> Propulate's best at 0 ms
    for label, sleep, per_worker in CASES:
        got: dict[str, list[dict[str, Any]]] = {"atoll": [], "propulate": [], "control": []}
        for rep in range(REPEATS):  # interleaved, so that a noisy moment hits both sides
            for side in got:
                got[side].append(_measure(side, sleep, per_worker, seed=rep + 1))
        a, p, c = (min(overhead(r) for r in got[side]) for side in got)
        rate_a = max(r["evaluations"] / r["wall"] for r in got["atoll"])
        rate_p = max(r["evaluations"] / r["wall"] for r in got["propulate"])
        where = f"{label} objective, {RANKS} ranks, {ISLANDS} islands, {per_worker}/worker"
        if sleep == 0.0:
            propulate_best[per_worker] = p
        rows.append(Row(f"overhead per evaluation, {where} (best of {REPEATS})",
                        f"{a * 1e3:.3f} ms", f"{p * 1e3:.3f} ms / control {c * 1e3:.3f} ms",
                        f"{a / p:.3f}", TARGET, a * TARGET_FACTOR <= p))
        rows.append(Row(f"throughput, {where} (best of {REPEATS})", f"{rate_a:.0f} /s",
                        f"{rate_p:.0f} /s", f"{rate_a / rate_p:.2f}"))
        gap = min(r["gap"] for r in got["atoll"])
        rows.append(Row(f"Atoll's loop between evaluations, {where}: median time from one "
                        f"evaluation's end to the worker's next start, in the record (best of "
                        f"{REPEATS})", f"{gap * 1e3:.3f} ms"))
        runs = "; ".join(f"{side} {', '.join(fmt(overhead(r) * 1e3) for r in got[side])} ms"
                         for side in got)
        gaps = ", ".join(fmt(r["gap"] * 1e3) for r in got["atoll"])
        log(f"  {where}: overhead {runs}; atoll between evaluations {gaps} ms")
        notes.append(f"overhead {where}: {runs}; atoll between evaluations {gaps} ms")
    label, sleep, per_worker = ATOLL_ONLY
    runs = [_measure("atoll", sleep, per_worker, seed=rep + 1) for rep in range(REPEATS)]
    a = min(overhead(r) for r in runs)
    where = f"{label} objective, {RANKS} ranks, {ISLANDS} islands, {per_worker}/worker"
    # Propulate's overhead grows with the budget, so its best at the largest budget it ran
    # here is a lower bound for its overhead at this one: a conservative yardstick.
    budget, p = max(propulate_best.items())
    rows.append(Row(f"overhead per evaluation, {where} (Atoll only, best of {REPEATS})",
                    f"{a * 1e3:.3f} ms", f"not run (too slow); {p * 1e3:.3f} ms at {budget}/worker",
                    f"{a / p:.3f}", f"<= 0.1 x Propulate at {budget}/worker in this run",
                    a * TARGET_FACTOR <= p))
    rate = max(r["evaluations"] / r["wall"] for r in runs)
    rows.append(Row(f"throughput, {where} (Atoll only, best of {REPEATS})", f"{rate:.0f} /s"))
    log(f"  {where}: overhead atoll {', '.join(fmt(overhead(r) * 1e3) for r in runs)} ms")
    notes.append(f"overhead {where}: atoll {', '.join(fmt(overhead(r) * 1e3) for r in runs)} ms")
    warm, woken = wake_up_cost()
    rows.append(Row("this machine: one breeding step of Atoll's default propagator (schwefel "
                    "space), one process: right after a 10 ms sleep vs warm (median of 300)",
                    f"{woken * 1e6:.1f} us after sleep", f"{warm * 1e6:.1f} us warm",
                    f"{woken / warm:.1f}", "report"))
    log(f"  breeding step: {warm * 1e6:.1f} us warm, {woken * 1e6:.1f} us after a 10 ms sleep")
    return rows, notes


def wake_up_cost(repeats: int = 300) -> tuple[float, float]:
    """Median seconds of one breeding step run back to back, and right after a 10 ms sleep.

    On a virtual machine whose core idled, the first code to run meets cold caches: this is
    what every evaluation of a sleeping objective pays on both sides, isolated from MPI.
    """
    from atoll.engine.island import breeding_rng
    from atoll.engine.population import Population
    from atoll.evolution import ga_strategy
    from atoll.space import Space
    from objectives import space_table

    space = Space.from_dict(space_table("schwefel"))
    strategy, rng, population = ga_strategy(space, 4), breeding_rng(1, 0, 0), Population()
    for i in range(50):
        ind = strategy.ask(population.ranked, rng, i)
        ind.loss = rng.random()
        population.learn(ind)
        strategy.tell(ind)

    def timed(pause: float) -> float:
        times = []
        for _ in range(repeats):
            if pause:
                time.sleep(pause)
            start = time.perf_counter()
            strategy.ask(population.ranked, rng, -1)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    return timed(0.0), timed(0.01)
