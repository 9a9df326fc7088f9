"""The island view: one entry per id, versions, early deactivations, ranking."""

import math
import random

from atoll.engine.population import Population
from atoll.individual import Individual, Status


def ind(i, loss, version=0, owner=0, status=Status.OK):
    return Individual(id=i, params={"x": float(i)}, loss=loss, version=version, owner=owner,
                      status=status)


def test_ranked_is_sorted_best_first_and_excludes_failures():
    pop = Population()
    losses = [random.Random(1).uniform(0, 10) for _ in range(50)]
    for i, loss in enumerate(losses):
        pop.learn(ind(i, loss))
    pop.learn(ind(99, math.nan, status=Status.FAILED))
    assert [x.loss for x in pop.ranked] == sorted(losses)
    assert len(pop) == 51 and 99 in pop and all(x.id != 99 for x in pop.ranked)


def test_newer_version_replaces_and_stale_copy_is_ignored():
    pop = Population()
    pop.learn(ind(1, 5.0, version=1))
    assert not pop.learn(ind(1, 5.0, version=0))
    assert pop.get(1).version == 1
    pop.learn(ind(1, 5.0, version=2, owner=3))
    assert pop.get(1).owner == 3 and len(pop.ranked) == 1


def test_deactivation_before_arrival_applies_when_the_copy_arrives():
    pop = Population()
    pop.deactivate(7, 2)
    pop.learn(ind(7, 1.0, version=2))
    assert not pop.get(7).active and pop.ranked == []
    pop.learn(ind(7, 1.0, version=3))
    assert pop.get(7).active and len(pop.ranked) == 1


def test_deactivation_removes_from_ranking_only_for_matching_version():
    pop = Population()
    pop.learn(ind(1, 1.0, version=1))
    pop.learn(ind(2, 1.0, version=0))
    pop.deactivate(1, 0)  # an older copy: ignored
    assert pop.get(1).active
    pop.deactivate(1, 1)
    assert [x.id for x in pop.ranked] == [2]


def test_owned_by_lists_only_that_workers_active_individuals():
    pop = Population()
    for i in range(6):
        pop.learn(ind(i, float(6 - i), owner=i % 2))
    assert [x.id for x in pop.owned_by(1)] == [5, 3, 1]
