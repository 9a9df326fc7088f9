"""One worker: the ranks that evaluate an individual together.

The leader breeds and hands each individual to its followers through a non-blocking broadcast
of a fixed-layout record; followers wait with a back-off so that an idle rank does not spin on
a core the evaluation needs. An id of ``STOP_ID`` ends the followers' loop.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from atoll.backoff import wait_gently
from atoll.engine.island import Budget, IslandLoop, IslandStats
from atoll.engine.population import Population
from atoll.engine.protocol import Codec
from atoll.individual import Individual

if TYPE_CHECKING:
    from mpi4py import MPI

STOP_ID = -2
_ID = struct.Struct("<q")  # an individual's record starts with its id


class WorkerLink:
    """Leader-to-followers hand-over of individuals within one worker communicator."""

    def __init__(self, comm: MPI.Comm, codec: Codec) -> None:
        self.comm = comm
        self.codec = codec
        self.single = comm.Get_size() == 1
        self._buf = bytearray(codec.size)

    def _bcast(self, buf: bytes | bytearray) -> None:
        from mpi4py import MPI

        wait_gently(self.comm.Ibcast([buf, MPI.BYTE], root=0))

    def hand_out(self, ind: Individual) -> None:
        """Leader: give the followers the individual to evaluate next."""
        if not self.single:
            self._bcast(bytearray(self.codec.encode(ind)))

    def stop(self) -> None:
        """Leader: release the followers."""
        if not self.single:
            buf = bytearray(self.codec.size)
            _ID.pack_into(buf, 0, STOP_ID)
            self._bcast(buf)

    def follow(self, evaluate: Callable[[Individual], None]) -> int:
        """Follower: evaluate whatever the leader hands out until it says stop."""
        count = 0
        while True:
            self._bcast(self._buf)
            if _ID.unpack_from(self._buf)[0] == STOP_ID:
                return count
            evaluate(self.codec.decode(self._buf))
            count += 1


class Evaluator(Protocol):
    """Evaluates an individual in place on this rank; closed when the worker's job ends."""

    def __call__(self, ind: Individual) -> None: ...
    def close(self) -> None: ...


class ClosingLog(Protocol):
    """The leader's record, closed at the end with the population it knew (None: not a clean
    end, so nothing of the population is written)."""

    def close(self, population: Population | None = None) -> None: ...


class Leader:
    """A worker leader's part in a job: the island loop, then releasing the followers, closing
    the log and the evaluator, whatever happened."""

    def __init__(self, loop: IslandLoop, link: WorkerLink, log: ClosingLog,
                 evaluator: Evaluator) -> None:
        self.loop, self.link, self.log, self.evaluator = loop, link, log, evaluator

    def run(self, budget: Budget) -> IslandStats:
        finished = False
        try:
            stats = self.loop.run(budget)
            finished = True
            return stats
        finally:
            try:
                self.link.stop()
            finally:
                try:
                    self.log.close(self.loop.population if finished else None)
                finally:
                    self.evaluator.close()


class Follower:
    """A follower's part in a job: evaluate what the leader hands out until it says stop."""

    def __init__(self, link: WorkerLink, evaluator: Evaluator) -> None:
        self.link, self.evaluator = link, evaluator

    def run(self, budget: Budget) -> IslandStats:
        """``budget`` is the leader's business; a follower only follows."""
        try:
            self.link.follow(self.evaluator)
        finally:
            self.evaluator.close()
        return IslandStats()
