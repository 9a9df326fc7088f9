"""Layout planning: pure arithmetic and its error messages (the MPI split runs in test_mpi)."""

import pytest

from atoll.engine.topology import plan_layout
from atoll.errors import LayoutError


@pytest.mark.parametrize("world,k,islands", [(1, 1, 1), (4, 1, 2), (4, 2, 2), (8, 2, 3),
                                              (6, 3, 2), (32, 1, 4)])
def test_every_worker_is_on_exactly_one_island_in_contiguous_blocks(world, k, islands):
    layout = plan_layout(world, k, islands)
    assert layout.workers == world // k
    seen = [w for i in range(islands) for w in layout.workers_on_island(i)]
    assert seen == list(range(layout.workers))
    sizes = [len(layout.workers_on_island(i)) for i in range(islands)]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
    assert [layout.worker_of_rank(r) for r in range(world)] == [r // k for r in range(world)]


def test_world_not_divisible_by_ranks_per_worker_says_how_to_fix():
    with pytest.raises(LayoutError, match=r"5 MPI ranks cannot form workers of "
                       r"ranks_per_worker=2: start a multiple of 2"):
        plan_layout(5, 2, 1)


def test_more_islands_than_workers_names_the_limit():
    with pytest.raises(LayoutError, match=r"search.islands=3 is more than the 2 worker\(s\).*"
                       r"at most 2"):
        plan_layout(4, 2, 3)


@pytest.mark.parametrize("k,islands,key", [(0, 1, "ranks_per_worker"), (1, 0, "islands")])
def test_non_positive_numbers_are_rejected(k, islands, key):
    with pytest.raises(LayoutError, match=key):
        plan_layout(4, k, islands)
