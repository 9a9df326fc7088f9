"""One side's search logic in one process, without MPI or timing:

    python sequential_side.py SIDE FUNCTION SEEDS EVALUATIONS POP_SIZE [BURST]

prints the best loss of each seed as JSON. Without BURST: the default propagator alone in a
plain loop (breed from everything evaluated so far, evaluate, repeat). With BURST: the island
model, 4 workers on 2 islands with real migration (probability 0.1 per worker and evaluation,
1 migrant), EVALUATIONS / 4 per worker, driven in a fixed schedule: workers 0, 1, 2, 3 take
turns, each running BURST evaluations in a row, and every message arrives at once. BURST 1 is
a perfectly even interleaving; a larger BURST is what an oversubscribed core does to fast
evaluations (a rank runs many in one time slice while its island partner waits for the core).

SIDE "atoll" runs from Atoll's venv and drives ``IslandLoop.step`` over the in-memory
mailbox (atoll.engine.memory);
"propulate" runs from Propulate's and drives its own ``Migrator`` methods, in the order of its
``propulate()`` loop, over in-memory communicators. Each side uses its own RNGs, seeded from
1000 + seed (and the worker).
"""

from __future__ import annotations

import json
import sys

import numpy as np

from objectives import FUNCTIONS, space, space_table


def atoll_run(function: str, seed: int, evaluations: int, pop_size: int) -> float:
    from atoll.engine.island import breeding_rng
    from atoll.engine.population import Population
    from atoll.evolution import ga_strategy
    from atoll.space import Space

    f = FUNCTIONS[function][0]
    search_space = Space.from_dict(space_table(function))
    strategy, rng, population = ga_strategy(search_space, pop_size), \
        breeding_rng(1000 + seed, 0, 0), Population()
    best = float("inf")
    for n in range(evaluations):
        ind = strategy.ask(population.ranked, rng, n)
        ind.loss = float(f(np.array([ind.params[k] for k in search_space.names])))
        population.learn(ind)
        strategy.tell(ind)
        best = min(best, ind.loss)
    return best


def _limits(function: str) -> dict[str, tuple[float, float]]:
    """The function's space as Propulate's limits (float bounds make float parameters)."""
    return {name: (float(low), float(high)) for name, (low, high) in space(function).items()}


def propulate_run(function: str, seed: int, evaluations: int, pop_size: int) -> float:
    import random

    from propulate.utils import get_default_propagator

    f = FUNCTIONS[function][0]
    limits = _limits(function)
    propagator = get_default_propagator(pop_size, limits, rng=random.Random(1000 + seed))
    population: list = []
    for _ in range(evaluations):
        ind = propagator(population)
        ind.loss = float(f(np.array([ind[k] for k in limits])))
        population.append(ind)
    return min(ind.loss for ind in population)


WORKERS, ISLANDS, MIGRATION_PROBABILITY = 4, 2, 0.1


def _turns(per_worker: int, burst: int) -> list[int]:
    """Which worker runs each evaluation: 0, 1, 2, 3 in turn, ``burst`` evaluations each (the
    last turn shorter when ``burst`` does not divide ``per_worker``)."""
    return [w for start in range(0, per_worker, burst) for w in range(WORKERS)
            for _ in range(min(burst, per_worker - start))]


def atoll_islands(function: str, seed: int, evaluations: int, pop_size: int,
                  burst: int) -> float:
    from atoll.config import MigrationConfig
    from atoll.engine.island import IslandLoop, breeding_rng
    from atoll.engine.memory import MemoryPost, MemoryRecorder
    from atoll.engine.topology import Layout
    from atoll.evolution import ga_strategy
    from atoll.individual import Status
    from atoll.space import Space

    f = FUNCTIONS[function][0]
    search_space = Space.from_dict(space_table(function))
    post = MemoryPost(WORKERS)
    best = [float("inf")]

    def evaluate(ind) -> None:
        ind.loss = float(f(np.array([ind.params[k] for k in search_space.names])))
        ind.status = Status.OK
        best[0] = min(best[0], ind.loss)

    loops = [IslandLoop(layout=Layout(WORKERS, 1, ISLANDS), worker=w, mailbox=post.mailbox(w),
                        strategy=ga_strategy(search_space, pop_size), evaluate=evaluate,
                        recorder=MemoryRecorder(),
                        migration=MigrationConfig("migration", MIGRATION_PROBABILITY, 1),
                        rng=breeding_rng(1000 + seed, 0, w)) for w in range(WORKERS)]
    done = [0] * WORKERS
    for w in _turns(evaluations // WORKERS, burst):
        loops[w].step(done[w])
        done[w] += 1
    return best[0]


def propulate_islands(function: str, seed: int, evaluations: int, pop_size: int,
                      burst: int) -> float:
    import copy
    import random

    from mpi4py import MPI
    from propulate.migrator import Migrator
    from propulate.propagators import SelectMin
    from propulate.utils import get_default_propagator

    f = FUNCTIONS[function][0]
    limits = _limits(function)
    queues: dict[tuple[str, int], list] = {}
    best = [float("inf")]

    class Comm:  # the calls Migrator makes, on in-memory queues; delivers at once
        def __init__(self, name: str, rank: int, size: int, base: int) -> None:
            self.name, self.rank, self.size, self.base = name, rank, size, base

        def send(self, obj, dest: int, tag: int) -> None:
            queues.setdefault((self.name, self.base + dest), []).append(
                (self.rank, tag, copy.deepcopy(obj)))

        def _queue(self) -> list:
            return queues.setdefault((self.name, self.base + self.rank), [])

        def _find(self, source: int, tag: int) -> int | None:
            for i, (s, t, _) in enumerate(self._queue()):
                if t == tag and source in (s, MPI.ANY_SOURCE):
                    return i
            return None

        def iprobe(self, source: int, tag: int, status: MPI.Status) -> bool:
            i = self._find(source, tag)
            if i is not None:
                status.Set_source(self._queue()[i][0])
            return i is not None

        def recv(self, source: int, tag: int):
            return self._queue().pop(self._find(source, tag))[2]

    def loss(ind) -> float:
        value = float(f(np.array([ind[k] for k in limits])))
        best[0] = min(best[0], value)
        return value

    per_island = WORKERS // ISLANDS
    topology = np.ones((ISLANDS, ISLANDS), dtype=int)
    np.fill_diagonal(topology, 0)
    workers = []
    for w in range(WORKERS):
        island, rank = divmod(w, per_island)
        rng = random.Random(f"{1000 + seed}:{w}")
        m = object.__new__(Migrator)  # its __init__ wants real communicators and checkpoints
        m.loss_fn, m.rng = loss, rng
        m.propagator = get_default_propagator(pop_size, limits, rng=rng)
        m.generations, m.generation, m.island_idx = evaluations // WORKERS, 0, island
        m.island_comm = Comm("island", rank, per_island, island * per_island)
        m.propulate_comm = Comm("world", w, WORKERS, 0)
        m.worker_sub_comm, m.surrogate = MPI.COMM_SELF, None
        m.migration_prob = MIGRATION_PROBABILITY  # per worker, as Islands computes it
        m.migration_topology, m.emigration_propagator = topology, SelectMin
        m.island_displs = np.arange(0, WORKERS, per_island)
        m.island_counts = np.full(ISLANDS, per_island)
        m.population, m.emigrated = [], []
        workers.append(m)
    for w in _turns(evaluations // WORKERS, burst):
        m = workers[w]  # one pass of Migrator.propulate()'s loop, checkpoints left out
        m._evaluate_individual()
        m._receive_intra_island_individuals()
        if m.rng.random() < m.migration_prob:
            m._send_emigrants()
        m._receive_immigrants()
        m._deactivate_emigrants()
        m.generation += 1
    return best[0]


def main() -> None:
    side, function = sys.argv[1], sys.argv[2]
    seeds, evaluations, pop_size = map(int, sys.argv[3:6])
    if len(sys.argv) > 6:
        burst = int(sys.argv[6])
        islands = atoll_islands if side == "atoll" else propulate_islands
        best = [islands(function, seed, evaluations, pop_size, burst) for seed in range(seeds)]
    else:
        run = atoll_run if side == "atoll" else propulate_run
        best = [run(function, seed, evaluations, pop_size) for seed in range(seeds)]
    print(json.dumps(best))


if __name__ == "__main__":
    main()
