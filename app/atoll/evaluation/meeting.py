"""The calls every rank of a worker must make together (``ctx.report``,
``ctx.stop_requested``, the checkpoint calls, the first use of ``ctx.process_group`` or
``ctx.device``): the ranks meet before each, so that a call made on some ranks only is one
clear error instead of a hang.

The leader coordinates. A follower tells it which call it reached and waits for its answer.
The leader waits for every follower, at most ``distributed.timeout`` seconds
(``search.eval_timeout`` cuts the wait short), then answers each follower that arrived: go on,
or the error naming the call, its epoch and the ranks that did not make it. A follower that
reached another call, or the end of the evaluation, counts as not making it at once. After the
objective returns, every rank meets at the end of the evaluation, where the leader answers
whatever calls its followers still make: the ranks then leave the evaluation together, with
no message left in flight, and the next individual starts in step.

Messages go point to point on a duplicate of the worker's communicator, so they never meet the
objective's own. A follower waits for the leader's answer without a limit of its own: the
leader reaches a meeting or the end of its evaluation by its own limits (its objective's
``eval_timeout``, the process group's timeout in a torch collective).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from atoll.backoff import Backoff
from atoll.errors import ObjectiveError
from atoll.evaluation.alarm import HeldAlarm, alarm_held

if TYPE_CHECKING:
    from mpi4py import MPI

END = "the end of the evaluation"
_TAG = 28
_SPIN = 0.01
"""Seconds a rank polls for its partners without sleeping: ranks that train together arrive
within it, and a sleep under load costs more than the whole meeting."""


class CollectiveCallError(ObjectiveError):
    """A collective ``ctx`` call was not made on every rank of the worker."""


class Meeting:
    """Where the ranks of one worker meet before each collective ``ctx`` call (collective to
    create and to :meth:`close`)."""

    def __init__(self, comm: MPI.Comm, timeout: float) -> None:
        self.comm = comm.Dup()
        self.timeout = timeout
        self._sent: list[Any] = []
        self._ended: set[int] = set()  # leader: followers already at the end of the evaluation

    @contextmanager
    def together(self, call: str) -> Iterator[None]:
        """Every rank of the worker reaches ``call`` (e.g. ``ctx.report(epoch=3)``) before any
        runs the block (the call's collective work); raises :class:`CollectiveCallError` on
        every rank that reached it otherwise. ``search.eval_timeout`` fires after the block,
        so that no rank leaves the call's collectives halfway."""
        with alarm_held() as alarm:
            if self.comm.Get_rank() == 0:
                self._lead(call, alarm)
            else:
                self._follow(call)
            yield

    def end(self) -> None:
        """The end of the evaluation on this rank: wait until every rank is there."""
        if self.comm.Get_rank() == 0:
            self._end_leading()
        else:
            self._follow(END)
        from mpi4py import MPI

        MPI.Request.waitall(self._sent)
        self._sent.clear()

    def close(self) -> None:
        self.comm.Free()

    def _send(self, dest: int, text: str) -> None:
        self._sent.append(self.comm.isend(text, dest=dest, tag=_TAG))

    def _receive(self, source: int) -> str:
        """The next message from ``source``: polled at once for a moment, then gently."""
        backoff = Backoff(spin=_SPIN)
        while not self.comm.iprobe(source=source, tag=_TAG):
            backoff.wait()
        return str(self.comm.recv(source=source, tag=_TAG))

    def _follow(self, call: str) -> None:
        self._send(0, call)
        answer = self._receive(0)
        if answer and call != END:
            raise CollectiveCallError(answer)

    def _lead(self, call: str, alarm: HeldAlarm) -> None:
        followers = range(1, self.comm.Get_size())
        arrived: dict[int, str] = dict.fromkeys(self._ended, END)
        deadline = time.monotonic() + self.timeout
        late = f"did not call it within distributed.timeout = {self.timeout:g} s"
        backoff = Backoff(spin=_SPIN)
        while len(arrived) < len(followers):
            for rank in followers:
                if rank not in arrived and self.comm.iprobe(source=rank, tag=_TAG):
                    arrived[rank] = self.comm.recv(source=rank, tag=_TAG)
                    backoff.reset()
            if len(arrived) == len(followers):
                break
            if alarm.fired:
                alarm.taken = True
                late = "had not called it when search.eval_timeout ran out"
                break
            if time.monotonic() >= deadline:
                break
            backoff.wait()
        missing = {rank: late for rank in followers if rank not in arrived}
        missing |= {rank: _elsewhere(there) for rank, there in arrived.items() if there != call}
        answer = _error(call, missing) if missing else ""
        for rank, there in arrived.items():
            if rank not in self._ended:
                self._send(rank, answer)
            if there == END:
                self._ended.add(rank)
        if answer:
            raise CollectiveCallError(answer)

    def _end_leading(self) -> None:
        """Answer every call a follower still makes (its partners are gone: an error) until
        each has reached the end."""
        for rank in range(1, self.comm.Get_size()):
            while rank not in self._ended:
                there = self._receive(rank)
                if there == END:
                    self._ended.add(rank)
                    self._send(rank, "")
                else:
                    self._send(rank, _error(there, {0: "ended the evaluation without it"}))
        self._ended.clear()


def _elsewhere(there: str) -> str:
    return "ended the evaluation without it" if there == END else f"called {there} instead"


def _error(call: str, missing: dict[int, str]) -> str:
    """One line: the call, then what each rank that did not make it did."""
    ranks = "; ".join(f"rank {rank} {what}" for rank, what in sorted(missing.items()))
    return f"{call} is collective, but not every rank of the worker called it: {ranks}"
