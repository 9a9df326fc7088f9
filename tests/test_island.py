"""The island loop: its random draws, and its rules (ids, results, migration, pollination,
deactivation, budget) driven in one process over the in-memory mailbox."""

from __future__ import annotations

import statistics

import pytest

from atoll.config import MigrationConfig
from atoll.engine.island import Budget, IslandLoop, breeding_rng, geometric
from atoll.engine.protocol import Tag
from atoll.engine.topology import Layout
from atoll.evolution import default_propagator
from atoll.individual import Individual, Status
from atoll.space import Space
from memory_mailbox import MemoryPost, MemoryRecorder


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
                       propagator=default_propagator(SPACE, 4), evaluate=sphere,
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
