"""Stopping is a state, not a crash: a signal on any rank reaches every rank.

SLURM sends SIGTERM or SIGUSR1 (``--signal``) before a time limit, perhaps to one task only.
The rank that gets it sends a one-byte notice to every other rank on a private duplicate of the
world communicator; every rank checks for notices with a non-blocking probe where it waits
anyway (the leader before breeding, followers while idle, all ranks in ``ctx.report`` and
``ctx.stop_requested``). The search then stops breeding, ends evaluations at their next epoch
boundary (a command objective's at once), flushes, and the job exits with
:data:`atoll.exit_codes.EXIT_STOPPED` so that a job script can resume it.
"""

from __future__ import annotations

import logging
import signal
import time
from types import FrameType
from typing import TYPE_CHECKING, Any

import numpy as np

from atoll.backoff import wait_gently
from atoll.engine import early
from atoll.engine.early import stop_signals

if TYPE_CHECKING:
    from mpi4py import MPI

log = logging.getLogger(__name__)

DISK_FULL = "disk full"
_NOTICE_TAG = 75
WALL_TIME = "wall time"
PROBE_INTERVAL = 1e-2
"""Seconds between probes for another rank's notice. A probe that finds nothing makes Open
MPI yield the core when ranks outnumber cores, a context switch that costs more than a fast
evaluation's bookkeeping; a hundredth of a second more before a stop is noticed costs
nothing."""


class StopFlag:
    """A stop request seen by any rank of ``world``, shared with all (collective to create)."""

    def __init__(self, world: MPI.Comm) -> None:
        from mpi4py import MPI

        self._mpi = MPI
        self.comm = world.Dup()
        self.reason = ""
        self._local = False
        self._seen = False
        self._requests: list[Any] = []
        self._notice = np.ones(1, dtype=np.int8)
        self._previous: dict[int, Any] = {}
        self.deadline = float("inf")
        """Unix time at which the job stops by itself (the wall-time budget)."""
        self._next_probe = 0.0

    def install(self) -> StopFlag:
        """Catch the stop signals (main thread only); :meth:`close` restores the old handlers.
        A stop signal caught before (:mod:`atoll.engine.early`) is a stop request now."""
        for sig in stop_signals():
            self._previous[sig] = signal.signal(sig, self._on_signal)
        if early.caught():
            self.request(early.caught())
        return self

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.request(signal.Signals(signum).name)

    def request(self, reason: str) -> None:
        """Ask every rank to stop (safe to call from a signal handler: it only sets flags)."""
        if not self._local:
            self.reason = reason
            self._local = True

    def requested(self) -> bool:
        """Whether this rank or any other asked to stop; cheap enough to call often."""
        if self._seen:
            return True
        now = time.time()
        if not self._local and now >= self.deadline:
            self.request(WALL_TIME)
        if self._local:
            # Every rank reaches the wall time by itself, and a launcher forwards a signal to
            # every rank: rank 0 warns once, the other ranks' logs keep their own line.
            level = logging.WARNING if self.reason != WALL_TIME and self.comm.Get_rank() == 0 \
                else logging.INFO
            log.log(level, "stop requested (%s): finishing evaluations and saving", self.reason)
            self._announce()
            self._seen = True
        elif now >= self._next_probe:
            self._next_probe = now + PROBE_INTERVAL
            self._seen = self.comm.Iprobe(source=self._mpi.ANY_SOURCE, tag=_NOTICE_TAG)
        return self._seen

    def agreed(self, group: MPI.Comm) -> bool:
        """Whether any rank of ``group`` (the ranks of one worker) asked to stop: the same answer
        on each, collective over ``group``. A rank that learns of the stop this way keeps it, so
        that its own next :meth:`requested` agrees before the notice itself has arrived (else a
        leader could breed and start another evaluation that its partner at once interrupts)."""
        if group.Get_size() == 1:
            return self.requested()
        self._seen = bool(group.allreduce(self.requested(), op=self._mpi.LOR))
        return self._seen

    def _announce(self) -> None:
        me = self.comm.Get_rank()
        for rank in range(self.comm.Get_size()):
            if rank != me:
                self._requests.append(self.comm.Isend(
                    [self._notice, self._mpi.BYTE], dest=rank, tag=_NOTICE_TAG))

    def close(self) -> bool:
        """Collect every notice, restore the signal handlers; returns whether a stop was asked.

        Collective: ranks agree on how many ranks announced, then each receives exactly that
        many notices, so none is left in flight when MPI finalizes.
        """
        stopped = self.requested()
        mine = np.array([1 if self._requests else 0], dtype=np.int64)
        total = np.zeros(1, dtype=np.int64)
        # Ranks that finish early wait here for the others: gently, to leave them the cores.
        wait_gently(self.comm.Iallreduce([mine, self._mpi.INT64_T], [total, self._mpi.INT64_T]))
        senders = int(total[0])
        buf = np.zeros(1, dtype=np.int8)
        for _ in range(senders - (1 if self._requests else 0)):
            self.comm.Recv([buf, self._mpi.BYTE], source=self._mpi.ANY_SOURCE, tag=_NOTICE_TAG)
        self._mpi.Request.Waitall(self._requests)
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self.comm.Free()
        return stopped or senders > 0
