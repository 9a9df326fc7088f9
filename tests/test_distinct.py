"""An island breeds again rather than repeat an evaluated candidate (``Distinct``): in one
process over the in-memory mailbox, and in real searches through the CLI."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

import pytest

from atoll.config import EvolutionConfig, MigrationConfig
from atoll.engine.island import IslandLoop, breeding_rng
from atoll.engine.memory import MemoryPost, MemoryRecorder
from atoll.engine.topology import Layout
from atoll.evolution.default import island_strategy
from atoll.evolution.distinct import RETRIES, Distinct, parameters_key
from atoll.evolution.strategy import Continue, Strategy
from atoll.individual import Individual, Status
from atoll.record import open_run
from atoll.space import Space
from conftest import atoll_cmd, run

INTS = Space.from_dict({"layers": {"type": "int", "low": 1, "high": 4},
                        "width": {"type": "int", "low": 16, "high": 256, "log": True},
                        "act": {"type": "categorical", "choices": ["relu", "tanh"]}})


def evaluate(ind: Individual) -> None:
    p = ind.params
    ind.loss = (p["layers"] - 3) ** 2 + abs(p["width"] - 100) / 100 + (p["act"] == "relu")
    ind.status = Status.OK


def evaluated(strategy: str, distinct: bool, seed: int, workers: int = 1,
              per_worker: int = 40) -> list[Individual]:
    """Every individual an island of ``workers`` evaluated, in order."""
    post = MemoryPost(workers)
    recorders = [MemoryRecorder() for _ in range(workers)]

    def breeder(worker: int) -> Strategy:
        inner = island_strategy(INTS, 0, workers, EvolutionConfig(strategy=strategy))
        return Distinct(inner, worker) if distinct else inner

    made = [IslandLoop(layout=Layout(workers, 1, 1), worker=w, mailbox=post.mailbox(w),
                       strategy=breeder(w), evaluate=evaluate, recorder=recorders[w],
                       migration=MigrationConfig(), rng=breeding_rng(seed, 0, w))
            for w in range(workers)]
    for generation in range(per_worker):
        for loop in made:
            loop.step(generation)
    return sorted((i for r in recorders for i in r.individuals), key=lambda i: i.id)


def repeats(individuals: list[Individual]) -> int:
    return len(individuals) - len({parameters_key(i.params) for i in individuals})


@pytest.mark.parametrize("strategy", ["ga", "hybrid"])
def test_an_island_evaluates_no_candidate_twice_where_its_strategy_would(strategy):
    seeds = range(5)
    assert sum(repeats(evaluated(strategy, False, s)) for s in seeds) > 0  # they would repeat
    for seed in seeds:
        assert repeats(evaluated(strategy, True, seed)) == 0


def test_workers_of_an_island_repeat_none_of_the_results_they_learned():
    """A partner's candidate counts once its result arrived (here: before the next breed)."""
    assert repeats(evaluated("ga", True, seed=1, workers=3, per_worker=20)) == 0


def overlapping(seed: int, announce: bool, workers: int = 3, per_worker: int = 30
                ) -> list[Individual]:
    """An island whose workers' evaluations overlap: each worker's evaluation begins the next
    worker's step (take in, breed, evaluate) before it ends, so a partner breeds while the
    candidate is in flight. ``announce``: the workers tell each other what they begin."""
    post = MemoryPost(workers)
    recorders = [MemoryRecorder() for _ in range(workers)]
    generation = 0

    def evaluate_after_next(worker: int) -> Callable[[Individual], None]:
        def evaluate_mine(ind: Individual) -> None:
            if worker + 1 < workers:
                made[worker + 1].step(generation)
            evaluate(ind)
        return evaluate_mine

    breeders = [Distinct(island_strategy(INTS, 0, workers, EvolutionConfig(strategy="ga")), w)
                for w in range(workers)]
    made = [IslandLoop(layout=Layout(workers, 1, 1), worker=w, mailbox=post.mailbox(w),
                       strategy=breeders[w], evaluate=evaluate_after_next(w),
                       recorder=recorders[w], migration=MigrationConfig(),
                       rng=breeding_rng(seed, 0, w),
                       hear_started=breeders[w].started if announce else None)
            for w in range(workers)]
    for generation in range(per_worker):
        made[0].step(generation)
    return sorted((i for r in recorders for i in r.individuals), key=lambda i: i.id)


def test_workers_do_not_evaluate_a_candidate_a_partner_is_evaluating():
    """A partner's candidate counts as it begins (its ``STARTED`` message), not only as its
    result arrives: without the message, workers breed what a partner is training."""
    seeds = range(10)
    assert sum(repeats(overlapping(s, announce=False)) for s in seeds) > 0
    for seed in seeds:
        assert repeats(overlapping(seed, announce=True)) == 0


def test_a_continuation_goes_through_even_though_its_parameters_are_known():
    known = Individual(id=4, params={"layers": 2, "width": 64, "act": "tanh"}, loss=1.0)

    class ContinuesIt:
        def ask(self, ranked, rng, ident):
            return Continue(known)

        def tell(self, result):
            pass

    breeder = Distinct(ContinuesIt())
    breeder.tell(known)
    assert breeder.ask([known], random.Random(0), 5) == Continue(known)
    assert breeder.repeats == 0


def test_an_exhausted_space_evaluates_repeats_and_says_so_once(caplog):
    space = Space.from_dict({"n": {"type": "int", "low": 0, "high": 2}})
    breeder = Distinct(island_strategy(space, 0, 1, EvolutionConfig(strategy="ga")), worker=3)
    rng, seen = random.Random(2), []
    with caplog.at_level(logging.WARNING, logger="atoll.evolution.distinct"):
        for ident in range(8):
            child = breeder.ask(seen, rng, ident)
            child.loss, child.status = float(child.params["n"]), Status.OK
            breeder.tell(child)
            seen = sorted([*seen, child], key=lambda i: i.loss)
    assert len(seen) == 8 and {i.params["n"] for i in seen} == {0, 1, 2}
    assert breeder.repeats >= RETRIES  # a repeat is evaluated only after RETRIES tries
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"worker 3: {RETRIES} candidates in a row repeated evaluated ones, so it "
                    "evaluates a repeat: its strategy finds few new points (a small space, or a "
                    "population converged on few values; said once)"]


CONFIG = """seed = {seed}
[objective]
name = "sphere"
[space.a]
type = "int"
low = -9
high = 9
[space.b]
type = "int"
low = -9
high = 9
[space.c]
type = "ordinal"
values = [-1, 0, 1]
[search]
evaluations = {evaluations}
[evolution]
strategy = "ga"
population_size = 8
"""


def test_a_search_records_no_repeated_candidate_and_an_exhausted_one_says_why(tmp_path):
    """One rank, one worker: every result is known before the next candidate is bred."""
    path = tmp_path / "ints.toml"
    path.write_text(CONFIG.format(seed=4, evaluations=80))
    done = run(atoll_cmd("search", "--config", str(path), "--run-dir", str(tmp_path / "a"),
                         "-q"))
    assert done.returncode == 0, done.stderr
    ind = open_run(tmp_path / "a").individuals
    keys = {(int(i["a"]), int(i["b"]), int(i["c"])) for i in ind}
    assert len(ind) == 80 and len(keys) == 80, sorted(keys)
    assert "repeated evaluated ones" not in done.stderr

    path.write_text(CONFIG.format(seed=4, evaluations=80).replace("high = 9", "high = -8"))
    done = run(atoll_cmd("search", "--config", str(path), "--run-dir", str(tmp_path / "b"),
                         "-q"))
    assert done.returncode == 0, done.stderr
    ind = open_run(tmp_path / "b").individuals
    assert len(ind) == 80 and len({(int(i["a"]), int(i["b"]), int(i["c"])) for i in ind}) == 12
    assert done.stderr.count("repeated evaluated ones") == 1, done.stderr
