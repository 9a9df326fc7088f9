"""Waiting without spinning: the back-off every polling loop of the engine uses.

On an oversubscribed node a rank that busy-polls takes the core from a rank that still has
work, so idle loops sleep with an exponential back-off instead.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mpi4py import MPI


class Backoff:
    """Exponential back-off for polling loops: reacts within microseconds when busy, yet an
    idle leader sleeps (up to 2 ms), so oversubscribed ranks leave their cores to evaluations."""

    def __init__(self, start: float = 2e-5, limit: float = 2e-3, spin: float = 0.0) -> None:
        """``spin``: seconds of polling without sleeping first, for a partner expected at
        once (a sleep costs a context switch, more on an oversubscribed node)."""
        self.start, self.limit, self.spin = start, limit, spin
        self.delay = start
        self._spin_until: float | None = None

    def reset(self) -> None:
        self.delay = self.start
        self._spin_until = None

    def wait(self) -> None:
        if self.spin:
            now = time.monotonic()
            if self._spin_until is None:
                self._spin_until = now + self.spin
            if now < self._spin_until:
                return
        time.sleep(self.delay)
        self.delay = min(self.delay * 2, self.limit)


def wait_gently(request: MPI.Request) -> None:
    """Wait for a non-blocking operation with :class:`Backoff` instead of MPI's busy polling,
    which on an oversubscribed node takes the cores from ranks that still have work."""
    backoff = Backoff()
    while not request.Test():
        backoff.wait()
