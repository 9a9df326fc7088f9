"""8. Atoll's strategies side by side: GA, CMA-ES, mixed (a GA and a CMA-ES island) and hybrid
islands.

The island model of the propagator rows (4 workers on 2 islands, real migration with
probability 0.1, workers taking turns one evaluation at a time over the tests' in-memory
mailbox), at DIMENSIONS dimensions and EVALUATIONS evaluations, SEEDS seeds per configuration.
One process, no timing: deterministic for given seeds, so a report rather than a target (the
README's advice on strategies rests on the peers rows, which time real searches under mpirun).
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np
from common import Row

from objectives import FUNCTIONS

SEEDS = 10
EVALUATIONS = 800
DIMENSIONS = 10
WORKERS, ISLANDS = 4, 2
CONFIGS = {"GA": ("ga", "ga"), "CMA-ES": ("cmaes", "cmaes"), "mixed": ("ga", "cmaes"),
           "hybrid": ("hybrid", "hybrid")}
CASES = ("sphere", "griewank", "ackley", "rastrigin", "schwefel")


def best_loss(function: str, strategies: tuple[str, str], seed: int) -> float:
    from atoll.config import EvolutionConfig, MigrationConfig
    from atoll.engine.island import IslandLoop, breeding_rng
    from atoll.engine.memory import MemoryPost, MemoryRecorder
    from atoll.engine.topology import Layout
    from atoll.evolution.default import island_strategy
    from atoll.individual import Status
    from atoll.space import FloatParam, Space

    f, low, high, _ = FUNCTIONS[function]
    space = Space(tuple(FloatParam(f"x{i}", low, high) for i in range(DIMENSIONS)))
    settings = EvolutionConfig(island_strategies=strategies)
    layout = Layout(WORKERS, 1, ISLANDS)
    post, best = MemoryPost(WORKERS), [float("inf")]

    def evaluate(ind: Any) -> None:
        ind.loss = float(f(np.array([ind.params[k] for k in space.names])))
        ind.status = Status.OK
        best[0] = min(best[0], ind.loss)

    loops = [IslandLoop(layout=layout, worker=w, mailbox=post.mailbox(w),
                        strategy=island_strategy(space, layout.island_of_worker(w),
                                                 WORKERS // ISLANDS, settings),
                        evaluate=evaluate, recorder=MemoryRecorder(),
                        migration=MigrationConfig("migration", 0.1, 1),
                        rng=breeding_rng(1000 + seed, 0, w)) for w in range(WORKERS)]
    for step in range(EVALUATIONS // WORKERS):
        for loop in loops:
            loop.step(step)
    return best[0]


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    rows, notes = [], []
    for function in CASES:
        medians = {name: statistics.median(best_loss(function, pair, seed)
                                           for seed in range(SEEDS))
                   for name, pair in CONFIGS.items()}
        text = ", ".join(f"{name} {value:.3g}" for name, value in medians.items())
        rows.append(Row(f"strategies, {function} {DIMENSIONS}-d: one process, 4 workers on 2 "
                        f"islands, {EVALUATIONS} evaluations, median best loss over {SEEDS} "
                        "seeds (Atoll: GA / mixed GA + CMA-ES / hybrid; other: CMA-ES)",
                        " / ".join(f"{medians[name]:.3g}" for name in ("GA", "mixed", "hybrid")),
                        f"{medians['CMA-ES']:.3g}", "-", "report"))
        log(f"  {function}: {text}")
        notes.append(f"strategies, {function}: {text}")
    return rows, notes


if __name__ == "__main__":
    for row in run()[0]:
        print(row)
