"""Rebuilding islands from the record under a new layout (pure functions, real dtypes)."""

from __future__ import annotations

import numpy as np

from atoll.engine.restore import completed_count, deal, moved_islands, restore_population
from atoll.engine.topology import plan_layout
from atoll.individual import Individual, Origin, Status
from atoll.record.schema import MODE_NAMES, individual_dtype, migration_dtype
from atoll.space import Space

SPACE = Space.from_dict({"x": {"type": "float", "low": 0, "high": 1},
                         "c": {"type": "categorical", "choices": ["a", "b"]}})


def individuals(rows: list[tuple[int, int, float, Status]]) -> np.ndarray:
    table = np.zeros(len(rows), dtype=individual_dtype(SPACE))
    for n, (ind_id, island, loss, status) in enumerate(rows):
        table[n]["id"], table[n]["island"], table[n]["loss"] = ind_id, island, loss
        table[n]["status"], table[n]["x"], table[n]["c"] = int(status), loss / 10, "b"
    return table


def migrations(rows: list[tuple[int, int, str, int, int]]) -> np.ndarray:
    table = np.zeros(len(rows), dtype=migration_dtype())
    for n, (ind_id, version, mode, source, target) in enumerate(rows):
        table[n]["individual"], table[n]["version"] = ind_id, version
        table[n]["mode"] = MODE_NAMES[mode]
        table[n]["from_island"], table[n]["to_island"] = source, target
    return table


def test_migrations_move_and_pollinations_copy_in_version_order():
    homes = moved_islands(migrations([(1, 2, "migration", 1, 2), (1, 1, "migration", 0, 1),
                                      (2, 1, "pollination", 0, 3)]))
    assert homes == {1: {2: 2}, 2: {0: 0, 3: 1}}  # island: the version of its copy there


def test_restore_maps_old_islands_onto_the_new_layout_and_skips_failures():
    ind = individuals([(0, 0, 0.5, Status.OK), (1, 1, 0.1, Status.OK), (2, 2, 0.3, Status.OK),
                       (3, 0, np.nan, Status.FAILED), (4, 3, 0.2, Status.INTERRUPTED)])
    mig = migrations([(0, 1, "migration", 0, 1)])
    layout = plan_layout(4, 1, 2)  # islands 0: workers 0,1; 1: workers 2,3
    zero = restore_population(ind, mig, SPACE, layout, 0)
    one = restore_population(ind, mig, SPACE, layout, 1)
    assert [i.id for i in zero.ranked] == [2]  # old island 2 -> 0; 0 migrated to old island 1
    assert [i.id for i in one.ranked] == [1, 0]  # best first
    assert all(i.owner in (2, 3) and i.island == 1 for i in one)
    assert one.get(0).params == {"x": 0.05, "c": "b"}
    assert completed_count(ind) == 4


def test_a_restored_copy_keeps_its_version_so_the_next_job_migrates_it_in_order():
    """Individual 0 went to old island 1 and back (versions 1, 2), individual 1 was copied to
    island 1; the next job's move of 0 numbers on from 2, and a later replay ends where it is."""
    ind = individuals([(0, 0, 0.5, Status.OK), (1, 0, 0.1, Status.OK)])
    first = migrations([(0, 1, "migration", 0, 1), (0, 2, "migration", 1, 0),
                        (1, 1, "pollination", 0, 1)])
    layout = plan_layout(4, 1, 2)
    zero = restore_population(ind, first, SPACE, layout, 0)
    one = restore_population(ind, first, SPACE, layout, 1)
    assert {i.id: i.version for i in zero} == {0: 2, 1: 0}
    assert {i.id: i.version for i in one} == {1: 1}
    moved_on = migrations([(0, zero.get(0).version + 1, "migration", 0, 1)])  # the next job's
    later = np.concatenate([first, moved_on])  # read in (job, worker) order
    assert moved_islands(later)[0] == {1: 3}
    assert [i.id for i in restore_population(ind, later, SPACE, layout, 1).ranked] == [1, 0]


def test_a_pbt_island_keeps_its_own_lineages_as_its_own():
    """PBT island 0 evaluated 0 and sent a copy to island 1 (version 1), which sent a copy of
    it back (version 2); 1 evaluated 1. Island 0 on its own, and one island for both: 0 is
    island 0's own (version 0), a member, not a copy (as one, its lineage would end and the
    member it replaced come back); 1 is island 1's own. The GA's islands keep the copies'
    versions, so that a next move numbers on."""
    ind = individuals([(0, 0, 0.5, Status.OK), (1, 1, 0.1, Status.OK)])
    copied = migrations([(0, 1, "pollination", 0, 1), (0, 2, "pollination", 1, 0)])
    apart, merged = plan_layout(4, 1, 2), plan_layout(2, 1, 1)
    assert {i.id: i.version for i in restore_population(ind, copied, SPACE, apart, 0,
                                                        lineages=True)} == {0: 0}
    assert {i.id: i.version for i in restore_population(ind, copied, SPACE, apart, 1,
                                                        lineages=True)} == {0: 1, 1: 0}
    assert {i.id: i.version for i in restore_population(ind, copied, SPACE, merged, 0,
                                                        lineages=True)} == {0: 0, 1: 0}
    assert {i.id: i.version for i in restore_population(ind, copied, SPACE, merged, 0)} == \
        {0: 2, 1: 0}
    # A GA island moved 0 back home (version 2): it keeps its version, so that a later job's
    # move of it numbers on and the replay ends where it is.
    moved = migrations([(0, 1, "pollination", 0, 1), (0, 2, "migration", 1, 0)])
    assert {i.id: i.version for i in restore_population(ind, moved, SPACE, apart, 0,
                                                        lineages=True)} == {0: 2}
    assert {i.id: i.version for i in restore_population(ind, moved, SPACE, apart, 1,
                                                        lineages=True)} == {1: 0}


def test_a_pbt_islands_members_are_dealt_out_to_its_workers_in_turn():
    """Members 0, 4, 6 and 8 (8 took 2's place); by id alone both workers' share would be
    worker 0's, and worker 1 would train on (a copy of) one of worker 0's members at once."""
    ind = individuals([(i, 0, 0.1 * i, Status.OK) for i in (0, 2, 4, 6, 8)])
    last = ind["id"] == 8
    ind["origin"][last], ind["parent_a"][last], ind["parent_b"][last] = int(Origin.PBT), 0, 2
    layout = plan_layout(2, 1, 1)  # one island of workers 0 and 1
    owners = {i.id: i.owner for i in restore_population(ind, migrations([]), SPACE, layout, 0,
                                                        lineages=True)}
    assert owners == {0: 0, 4: 1, 6: 0, 8: 1, 2: 0}
    assert {i.owner for i in restore_population(ind, migrations([]), SPACE, layout, 0)} == {0}


def test_interrupted_evaluations_go_on_where_they_ran_and_the_rest_to_the_fewest():
    """A requeue on the same layout continues each where it ran (a PBT lineage stays on its
    island); a worker gone, moved to another island or ran two hands them on to the workers
    with the fewest, of their island first: none gets more than its share of the budget."""
    def interrupted(*ran: tuple[int, int]) -> list[Individual]:
        return [Individual(id=n, params={"x": 0.0}, worker=worker, island=island,
                           status=Status.INTERRUPTED) for n, (worker, island) in enumerate(ran)]

    same = plan_layout(4, 1, 2)  # workers 0, 1 on island 0; 2, 3 on island 1
    assert deal(interrupted((3, 1), (1, 0), (2, 1)), same) == [3, 1, 2]
    # worker 1 ran two: its second goes to its island's idle worker 0, not island 1's
    assert deal(interrupted((1, 0), (1, 0), (2, 1)), same) == [1, 0, 2]
    # one island of 2 workers now: ran on island 1 (worker 3 gone) -> the fewest, lowest
    merged = plan_layout(2, 1, 1)
    assert deal(interrupted((3, 1), (1, 0), (0, 0)), merged) == [0, 1, 0]
    # 4 workers on one island split into 2 islands: workers 2 and 3 are on island 1 now, so
    # what they ran on island 0 goes to island 0's idle worker 1 first, then to the fewest
    split = plan_layout(4, 1, 2)
    assert deal(interrupted((0, 0), (2, 0), (3, 0)), split) == [0, 1, 2]
    loads = np.bincount(deal(interrupted(*[(0, 0)] * 9), split), minlength=4)
    assert loads.tolist() == [3, 2, 2, 2]  # one where it ran, the rest evenly
