"""4. Quality: median best loss over 5 seeds per function at 400 evaluations.

4 ranks (100 evaluations per worker), 2 islands, the same seeds on both sides; every function
and seed of one side runs in one mpirun, one search after the other. Both use their default
propagator with the same population size (Atoll's default, 2 x the workers of an island).
"""

from __future__ import annotations

import statistics
from typing import Any

from common import Row, launch
from throughput import task

from objectives import FUNCTIONS

RANKS = 4
ISLANDS = 2
PER_WORKER = 100
SEEDS = (1, 2, 3, 4, 5)


def better(a: list[float], b: list[float]) -> float:
    """How often a run of ``a`` beats a run of ``b`` (ties count half): 0.5 = no difference."""
    wins = sum((x < y) + 0.5 * (x == y) for x in a for y in b)
    return wins / (len(a) * len(b))


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    tasks = [task(0.0, PER_WORKER, seed, ranks=RANKS, islands=ISLANDS, function=f)
             for f in FUNCTIONS for seed in SEEDS]
    best: dict[str, dict[str, list[float]]] = {}
    for side in ("atoll", "propulate"):
        results = launch(side, RANKS, [dict(t) for t in tasks]).results
        for t, r in zip(tasks, results, strict=True):
            if r["evaluations"] != RANKS * PER_WORKER:
                raise RuntimeError(f"{side} {t['function']} seed {t['seed']}: "
                                   f"{r['evaluations']} evaluations")
            best.setdefault(t["function"], {}).setdefault(side, []).append(r["best"])
    rows, notes = [], []
    for f, sides in best.items():
        a, p = statistics.median(sides["atoll"]), statistics.median(sides["propulate"])
        ratio = "1 (both 0)" if a == p == 0 else ("inf" if p == 0 else f"{a / p:.3g}")
        dims = FUNCTIONS[f][3]
        rows.append(Row(f"quality: median best loss, {f} {dims}-d, 5 seeds, "
                        f"{RANKS * PER_WORKER} evaluations", f"{a:.4g}", f"{p:.4g}", ratio,
                        "<= Propulate", a <= p))
        log(f"  {f}: Atoll {[f'{v:.3g}' for v in sides['atoll']]}, "
            f"Propulate {[f'{v:.3g}' for v in sides['propulate']]}")
        notes.append(f"{f} best losses by seed {list(SEEDS)}: Atoll "
                     f"{', '.join(f'{v:.3g}' for v in sides['atoll'])}; Propulate "
                     f"{', '.join(f'{v:.3g}' for v in sides['propulate'])}; P(Atoll run better "
                     f"than Propulate run) = {better(sides['atoll'], sides['propulate']):.2f}")
    return rows, notes
