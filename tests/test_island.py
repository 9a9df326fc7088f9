"""The island loop: its random draws, and its rules (ids, results, migration, pollination,
deactivation, budget) driven in one process over the in-memory mailbox."""

from __future__ import annotations

import statistics

import pytest

from atoll.config import MigrationConfig
from atoll.engine.island import Budget, IslandLoop, breeding_rng, geometric
from atoll.engine.memory import MemoryPost, MemoryRecorder
from atoll.engine.population import Population
from atoll.engine.protocol import Tag
from atoll.engine.topology import Layout
from atoll.evolution import Continue, ga_strategy
from atoll.individual import Individual, Status
from atoll.space import Space


def test_breeding_rng_is_fixed_by_seed_job_and_worker() -> None:
    draws = [breeding_rng(7, 0, 1).random() for _ in range(2)]
    assert draws[0] == draws[1]
    others = {breeding_rng(*key).random() for key in [(7, 0, 1), (8, 0, 1), (7, 1, 1), (7, 0, 2)]}
    assert len(others) == 4


@pytest.mark.parametrize("p", [0.05, 0.3, 0.9])
def test_geometric_gap_has_the_mean_and_first_step_of_bernoulli_trials(p: float) -> None:
    rng = breeding_rng(1, 0, 0)
    gaps = [geometric(rng, p) for _ in range(20000)]
    assert min(gaps) == 1 and all(isinstance(g, int) for g in gaps)
    assert statistics.fmean(gaps) == pytest.approx(1 / p, rel=0.05)
    assert gaps.count(1) / len(gaps) == pytest.approx(p, abs=0.015)


def test_geometric_gap_with_certain_success_is_one() -> None:
    rng = breeding_rng(1, 0, 0)
    assert {geometric(rng, 1.0) for _ in range(100)} == {1}


# -- the loop's rules, driven in one process over the in-memory mailbox ----------------------


SPACE = Space.from_dict({"x": {"type": "float", "low": -1.0, "high": 1.0}})


def sphere(ind: Individual) -> None:
    ind.loss, ind.status = ind.params["x"] ** 2, Status.OK
    ind.started, ind.finished = 1.0, 2.0


def loops(workers: int, islands: int, migration: MigrationConfig | None = None,
          id_base: int = 0) -> tuple[list[IslandLoop], list[MemoryRecorder]]:
    post = MemoryPost(workers)
    recorders = [MemoryRecorder() for _ in range(workers)]
    made = [IslandLoop(layout=Layout(workers, 1, islands), worker=w, mailbox=post.mailbox(w),
                       strategy=ga_strategy(SPACE, 4), evaluate=sphere,
                       recorder=recorders[w], migration=migration or MigrationConfig(),
                       rng=breeding_rng(3, 0, w), id_base=id_base) for w in range(workers)]
    return made, recorders


def run_in_turns(made: list[IslandLoop], per_worker: int) -> None:
    for generation in range(per_worker):
        for loop in made:
            loop.step(generation)
    for loop in made:
        loop.mailbox.drain(loop._receive)


def test_ids_are_unique_and_follow_generation_workers_and_base() -> None:
    made, recorders = loops(workers=3, islands=1, id_base=100)
    run_in_turns(made, per_worker=5)
    ids = [ind.id for rec in recorders for ind in rec.individuals]
    assert sorted(ids) == list(range(100, 115))
    for w, rec in enumerate(recorders):
        assert [ind.id for ind in rec.individuals] == [100 + g * 3 + w for g in range(5)]
        assert {ind.worker for ind in rec.individuals} == {w}


def test_results_reach_the_island_and_no_other() -> None:
    made, recorders = loops(workers=4, islands=2, migration=MigrationConfig(probability=0.0))
    run_in_turns(made, per_worker=3)
    for loop in made:
        mates = set(loop.layout.workers_on_island(loop.island))
        expected = {ind.id for w in mates for ind in recorders[w].individuals}
        assert {ind.id for ind in loop.population} == expected
    assert all(not rec.migrations for rec in recorders)


def test_one_island_never_emigrates_whatever_the_probability() -> None:
    made, recorders = loops(workers=2, islands=1, migration=MigrationConfig(probability=1.0))
    run_in_turns(made, per_worker=6)
    assert all(not rec.migrations for rec in recorders)


def test_migration_moves_an_owned_individual_and_deactivates_it_at_home() -> None:
    made, recorders = loops(workers=4, islands=2, migration=MigrationConfig(probability=1.0))
    run_in_turns(made, per_worker=4)
    moved = [row for rec in recorders for row in rec.migrations]
    assert moved
    for ind_id, version, mode, source, target, from_worker, to_worker, _ in moved:
        assert mode == "migration" and source != target
        assert made[to_worker].island == target and made[from_worker].island == source
        # at home every copy of the version that left is inactive (the emigrant's peers were
        # told); on the target island the newer version arrived active with its new owner
        for w in made[0].layout.workers_on_island(source):
            home_copy = made[w].population.get(ind_id)
            assert home_copy is None or home_copy.version >= version or not home_copy.active
        arrived = made[to_worker].population.get(ind_id)
        assert arrived is not None and arrived.version >= version
    # an individual is only ever sent by the worker that owned that version
    owners = {(row[0], row[1]): row[6] for row in moved}
    for ind_id, version, *_, from_worker, _to, _t in moved:
        if version > 1:
            assert owners.get((ind_id, version - 1), from_worker) == from_worker


def test_pollination_copies_and_keeps_the_original_active() -> None:
    pollinate = MigrationConfig(mode="pollination", probability=1.0)
    made, recorders = loops(workers=2, islands=2, migration=pollinate)
    run_in_turns(made, per_worker=3)
    sent = [row for rec in recorders for row in rec.migrations]
    assert sent and {row[2] for row in sent} == {"pollination"}
    for ind_id, _version, _, _source, _target, from_worker, to_worker, _ in sent:
        original = made[from_worker].population.get(ind_id)
        assert original is not None and original.active  # copies never deactivate
        assert made[to_worker].population.get(ind_id) is not None
    # the senders' own best stayed parents at home
    for loop in made:
        assert any(ind.worker == loop.worker for ind in loop.population.ranked)


def test_a_late_deactivation_is_remembered_until_its_copy_arrives() -> None:
    made, _ = loops(workers=2, islands=1)
    ind = Individual(id=7, params={"x": 0.5}, loss=0.25, version=1)
    made[1]._receive(Tag.DEACTIVATE, 0, (7, 1))
    made[1]._receive(Tag.RESULT, 0, ind)
    assert made[1].population.get(7) is not None and not made[1].population.get(7).active
    assert made[1].population.ranked == []


def test_run_stops_at_the_budget_and_interrupted_evaluations_do_not_count() -> None:
    calls = []

    def interrupted_every_other(ind: Individual) -> None:
        sphere(ind)
        calls.append(ind.id)
        if len(calls) % 2 == 0:
            ind.status = Status.INTERRUPTED

    made, recorders = loops(workers=1, islands=1)
    made[0].evaluate = interrupted_every_other
    stats = made[0].run(Budget(6))
    assert stats.evaluations == 6 and len(recorders[0].individuals) == 6
    assert stats.completed == 3 and recorders[0].flushes == 1
    asked = iter([False, False, True])
    made2, _ = loops(workers=1, islands=1)
    assert made2[0].run(Budget(100, lambda: next(asked))).evaluations == 2


# -- the strategy seam: every result told once, in one order; continuations -----------------


class Recording:
    """The GA, noting every id it is told and every id it is asked for."""

    def __init__(self, continue_first: Individual | None = None) -> None:
        self.ga = ga_strategy(SPACE, 4)
        self.told: list[int] = []
        self.pending = continue_first

    def ask(self, ranked, rng, ident):
        if self.pending is not None:
            ind, self.pending = self.pending, None
            return Continue(ind)
        return self.ga.ask(ranked, rng, ident)

    def tell(self, result: Individual) -> None:
        self.told.append(result.id)
        self.ga.tell(result)


def test_a_strategy_is_told_every_result_of_its_island_once() -> None:
    """Own results, partners' and immigrants' (pollination copies come back with higher
    versions: told once all the same)."""
    post = MemoryPost(4)
    strategies = [Recording() for _ in range(4)]
    made = [IslandLoop(layout=Layout(4, 1, 2), worker=w, mailbox=post.mailbox(w),
                       strategy=strategies[w], evaluate=sphere, recorder=MemoryRecorder(),
                       migration=MigrationConfig(mode="pollination", probability=0.5),
                       rng=breeding_rng(3, 0, w)) for w in range(4)]
    run_in_turns(made, per_worker=10)
    for loop, strategy in zip(made, strategies, strict=True):
        assert len(strategy.told) == len(set(strategy.told))  # once each
        assert set(strategy.told) == {ind.id for ind in loop.population}
        own = {loop.id_base + g * 4 + loop.worker for g in range(10)}
        partner = {g * 4 + w for g in range(10) for w in loop.peers}
        assert own | partner <= set(strategy.told)
    immigrants = set(strategies[0].told) - {g * 4 + w for g in range(10) for w in (0, 1)}
    assert immigrants and all(i % 4 in (2, 3) for i in immigrants)


def test_a_restored_population_is_told_in_order_of_id_before_the_first_ask() -> None:
    restored = Population()
    for ident in (7, 3, 5):
        restored.learn(Individual(id=ident, params={"x": ident / 10}, loss=float(ident)))
    strategy = Recording()
    loop = IslandLoop(layout=Layout(1, 1, 1), worker=0, mailbox=MemoryPost(1).mailbox(0),
                      strategy=strategy, evaluate=sphere, recorder=MemoryRecorder(),
                      migration=MigrationConfig(), rng=breeding_rng(3, 0, 0), id_base=8,
                      population=restored)
    assert strategy.told == [3, 5, 7]
    loop.step(0)
    assert strategy.told == [3, 5, 7, 8]


def test_a_continued_individual_keeps_its_id_and_parameters_and_is_told_again() -> None:
    interrupted = Individual(id=5, params={"x": 0.5}, status=Status.INTERRUPTED, born=1.0)
    restored = Population()
    restored.learn(interrupted)
    strategy = Recording(continue_first=interrupted)
    recorder = MemoryRecorder()
    loop = IslandLoop(layout=Layout(1, 1, 1), worker=0, mailbox=MemoryPost(1).mailbox(0),
                      strategy=strategy, evaluate=sphere, recorder=recorder,
                      migration=MigrationConfig(), rng=breeding_rng(3, 0, 0), id_base=6,
                      population=restored)
    loop.step(0)
    loop.step(1)
    first, second = recorder.individuals
    assert (first.id, first.params, first.status, first.born) == (5, {"x": 0.5}, Status.OK, 1.0)
    assert first.loss == 0.25 and second.id == 6  # the first new id: none spent on 5
    assert strategy.told == [5, 5, 6] and loop.population.get(5).status == Status.OK
