"""One side's default propagator alone, in a plain loop: python sequential_side.py SIDE FUNCTION
SEEDS EVALUATIONS POP_SIZE prints the best loss of each seed as JSON.

No MPI, no asynchrony: breed from everything evaluated so far, evaluate, repeat. SIDE "atoll"
runs from Atoll's venv, "propulate" from Propulate's; each side uses its own RNG, seeded with
1000 + seed.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from objectives import FUNCTIONS


def atoll_run(function: str, seed: int, evaluations: int, pop_size: int) -> float:
    from atoll.evolution import default_propagator
    from atoll.population import Population
    from atoll.space import Space

    f, low, high, dims = FUNCTIONS[function]
    space = Space.from_dict({f"x{i}": {"type": "float", "low": low, "high": high}
                             for i in range(dims)})
    propagator, rng, population = default_propagator(space, pop_size), \
        np.random.default_rng(1000 + seed), Population()
    best = float("inf")
    for n in range(evaluations):
        ind = propagator(population.ranked, rng)[0]
        ind.id = n
        ind.loss = float(f(np.array([ind.params[k] for k in space.names])))
        population.learn(ind)
        best = min(best, ind.loss)
    return best


def propulate_run(function: str, seed: int, evaluations: int, pop_size: int) -> float:
    import random

    from propulate.utils import get_default_propagator

    f, low, high, dims = FUNCTIONS[function]
    limits = {f"x{i}": (float(low), float(high)) for i in range(dims)}
    propagator = get_default_propagator(pop_size, limits, rng=random.Random(1000 + seed))
    population: list = []
    for _ in range(evaluations):
        ind = propagator(population)
        ind.loss = float(f(np.array([ind[k] for k in limits])))
        population.append(ind)
    return min(ind.loss for ind in population)


def main() -> None:
    side, function = sys.argv[1], sys.argv[2]
    seeds, evaluations, pop_size = map(int, sys.argv[3:6])
    run = atoll_run if side == "atoll" else propulate_run
    print(json.dumps([run(function, seed, evaluations, pop_size) for seed in range(seeds)]))


if __name__ == "__main__":
    main()
