"""Who is who: workers of consecutive ranks, and islands of worker leaders.

``plan_layout`` is a pure function of three numbers so that layout errors are found (and tested)
without MPI; ``build_topology`` then splits a real communicator along that plan.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from atoll.errors import LayoutError

if TYPE_CHECKING:
    from mpi4py import MPI


@dataclass(frozen=True)
class Layout:
    """How a job's ranks are grouped. A property of one job, not of the run."""

    world_size: int
    ranks_per_worker: int
    islands: int

    @property
    def workers(self) -> int:
        return self.world_size // self.ranks_per_worker

    def worker_of_rank(self, rank: int) -> int:
        return rank // self.ranks_per_worker

    def island_of_worker(self, worker: int) -> int:
        """Islands take contiguous, near-equal blocks of workers."""
        return (worker * self.islands) // self.workers

    def workers_on_island(self, island: int) -> tuple[int, ...]:
        return tuple(w for w in range(self.workers) if self.island_of_worker(w) == island)

    def as_dict(self) -> dict[str, int]:
        return {"world_size": self.world_size, "ranks_per_worker": self.ranks_per_worker,
                "workers": self.workers, "islands": self.islands}


def plan_layout(world_size: int, ranks_per_worker: int, islands: int) -> Layout:
    """Check that the numbers fit together and say how to fix them when they do not."""
    if ranks_per_worker < 1:
        raise LayoutError(f"search.ranks_per_worker: expected >= 1, got {ranks_per_worker}")
    if islands < 1:
        raise LayoutError(f"search.islands: expected >= 1, got {islands}")
    if world_size % ranks_per_worker:
        raise LayoutError(
            f"{world_size} MPI rank{'' if world_size == 1 else 's'} cannot form workers of "
            f"ranks_per_worker={ranks_per_worker}: "
            f"start a multiple of {ranks_per_worker} ranks or change search.ranks_per_worker")
    workers = world_size // ranks_per_worker
    if islands > workers:
        raise LayoutError(
            f"search.islands={islands} is more than the {workers} worker(s) of this job "
            f"({world_size} ranks / {ranks_per_worker} per worker): lower search.islands to at "
            f"most {workers} or start more ranks")
    return Layout(world_size, ranks_per_worker, islands)


@dataclass(frozen=True)
class NodePlace:
    """Where a rank sits among the job's ranks on its node: how it picks its devices."""

    rank: int = 0
    """Its index among the job's ranks on the node."""
    ranks: int = 1
    """The job's ranks on the node."""
    same_gpus: bool = True
    """Whether all of them were given the same ``CUDA_VISIBLE_DEVICES`` (the node's or the
    job's GPUs, to share out), rather than each its own (``--gpus-per-task``)."""


@dataclass(frozen=True)
class Topology:
    """This rank's place in the layout, with the communicators it needs.

    ``leaders`` is a communicator of all worker leaders, where rank == worker index; it is
    ``None`` on ranks that are not leaders. Only the island loop sends messages on it.
    """

    layout: Layout
    world: MPI.Comm
    worker_comm: MPI.Comm
    leaders: MPI.Comm | None
    worker: int
    island: int
    node: NodePlace = NodePlace()

    @property
    def is_leader(self) -> bool:
        return self.worker_comm.Get_rank() == 0

    @property
    def island_workers(self) -> tuple[int, ...]:
        return self.layout.workers_on_island(self.island)


def build_topology(world: MPI.Comm, layout: Layout) -> Topology:
    """Split ``world`` into the workers and the leaders' communicator of ``layout`` (planned
    for ``world``'s size; collective on ``world``)."""
    from mpi4py import MPI

    rank = world.Get_rank()
    worker = layout.worker_of_rank(rank)
    worker_comm = world.Split(color=worker, key=rank)
    is_leader = worker_comm.Get_rank() == 0
    leaders = world.Split(color=0 if is_leader else MPI.UNDEFINED, key=rank)
    return Topology(layout=layout, world=world, worker_comm=worker_comm,
                    leaders=leaders if is_leader else None, worker=worker,
                    island=layout.island_of_worker(worker), node=node_place(world))


def node_place(world: MPI.Comm) -> NodePlace:
    """This rank's place among ``world``'s ranks on its node, from an MPI shared-memory split
    (collective on ``world``)."""
    from mpi4py import MPI

    node = world.Split_type(MPI.COMM_TYPE_SHARED, key=world.Get_rank())
    given = node.allgather(os.environ.get("CUDA_VISIBLE_DEVICES"))
    place = NodePlace(node.Get_rank(), node.Get_size(), len(set(given)) == 1)
    node.Free()
    return place
