"""What a scheduler's verdict on one report costs, against the curves its island reported.

Each rule (the median rule, successive halving) learns the curves of an island of ISLAND_SIZES
workers (CURVES_PER_WORKER each, EPOCHS epochs, as partners send them), then judges REPORTS
reports; the row gives the time per report at each size. The verdicts come from sorted
references, so the cost does not grow with the island. Target: at the largest
island, at most 3x the cost at the smallest (in one process, no MPI: the rule alone).
"""

from __future__ import annotations

import random
import time
from typing import Any

from common import Row

ISLAND_SIZES = (10, 100, 1000)
CURVES_PER_WORKER = 10
EPOCHS = 27
REPORTS = 20000
GROWTH = 3.0


def per_report(rule: str, workers: int) -> float:
    from atoll.config import PruningConfig
    from atoll.scheduling.worker import make_scheduler

    scheduler = make_scheduler(PruningConfig(rule=rule, min_completed=5, eta=3))
    rng = random.Random(workers)
    for _ in range(workers * CURVES_PER_WORKER):
        scheduler.learn([(epoch, rng.random() / (1 + epoch)) for epoch in range(EPOCHS)])
    reports = [(n, n % EPOCHS, rng.random()) for n in range(REPORTS)]
    start = time.perf_counter()
    for individual, epoch, value in reports:
        scheduler.on_report(individual, epoch, value)
    return (time.perf_counter() - start) / REPORTS


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    rows, notes = [], []
    for rule in ("median", "halving"):
        costs = {n: min(per_report(rule, n) for _ in range(3)) for n in ISLAND_SIZES}
        small, large = costs[ISLAND_SIZES[0]], costs[ISLAND_SIZES[-1]]
        shown = " / ".join(f"{costs[n] * 1e6:.2f}" for n in ISLAND_SIZES)
        log(f"  {rule}: {shown} us per report at {ISLAND_SIZES} workers")
        rows.append(Row(
            f"scheduler cost per report, {rule} rule, after the curves of an island of "
            f"{' / '.join(map(str, ISLAND_SIZES))} workers ({CURVES_PER_WORKER} curves of "
            f"{EPOCHS} epochs each; best of 3); ratio: largest / smallest island",
            f"{shown} us", "-", f"{large / small:.2g}", f"<= {GROWTH:g} x",
            large <= GROWTH * small))
        notes.append(f"scheduler costs, {rule}: {shown} us per report")
    return rows, notes
