"""The message protocol between worker leaders: tags, wire format, sending, polling, draining.

Nothing else in Atoll touches the leaders' communicator. Messages are typed numpy records sent
as raw bytes (no pickle on the wire); every send is non-blocking and its buffer is kept until
the send completes, so no leader ever blocks on a busy peer. Termination is exact: leaders
exchange how many messages each sent to each other (a non-blocking all-to-all) and keep
receiving until every one of them has arrived, so nothing is lost and nothing hangs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from enum import IntEnum
from typing import TYPE_CHECKING, Any

import numpy as np

from atoll.individual import Individual, Origin, Status
from atoll.space import CategoricalParam, FloatParam, IntParam, Space

if TYPE_CHECKING:
    from mpi4py import MPI


class Tag(IntEnum):
    """What a message carries."""

    RESULT = 1  # an evaluated individual, for every other worker of its island
    MIGRANT = 2  # an individual arriving on another island (moved or copied)
    DEACTIVATE = 3  # an individual that left this island: mark that copy inactive


_FIXED = [("id", "<i8"), ("island", "<i4"), ("worker", "<i4"), ("generation", "<i8"),
          ("owner", "<i4"), ("version", "<i4"), ("parent_a", "<i8"), ("parent_b", "<i8"),
          ("origin", "<i1"), ("status", "<i1"), ("loss", "<f8"), ("born", "<f8"),
          ("started", "<f8"), ("finished", "<f8")]

DEACTIVATE_DTYPE = np.dtype([("id", "<i8"), ("version", "<i4")])


class Codec:
    """Turns individuals into fixed-size records and back; categoricals travel as indices."""

    def __init__(self, space: Space) -> None:
        self.space = space
        fields = list(_FIXED)
        for p in space.params:
            kind = "<f8" if isinstance(p, FloatParam) else "<i8" if isinstance(p, IntParam) \
                else "<i4"
            fields.append(("p_" + p.name, kind))
        self.dtype = np.dtype(fields)
        # For decoding: each parameter's name and its choices (None: the value as it is).
        self._genes = tuple((p.name, p.choices if isinstance(p, CategoricalParam) else None)
                            for p in space.params)

    def encode(self, ind: Individual) -> np.ndarray:
        genes = tuple(p.index(ind.params[p.name]) if isinstance(p, CategoricalParam)
                      else ind.params[p.name] for p in self.space.params)
        return np.array([(ind.id, ind.island, ind.worker, ind.generation, ind.owner,
                          ind.version, ind.parents[0], ind.parents[1], int(ind.origin),
                          int(ind.status), ind.loss, ind.born, ind.started, ind.finished,
                          *genes)], dtype=self.dtype)

    def decode(self, rec: np.ndarray) -> Individual:
        # One .item() turns the whole record into Python numbers (per-field access is slower).
        (ind_id, island, worker, generation, owner, version, parent_a, parent_b, origin, status,
         loss, born, started, finished, *genes) = rec[0].item()
        params = {name: value if choices is None else choices[value]
                  for (name, choices), value in zip(self._genes, genes, strict=True)}
        return Individual(
            id=ind_id, params=params, island=island, worker=worker, generation=generation,
            owner=owner, version=version, parents=(parent_a, parent_b), origin=_ORIGINS[origin],
            status=_STATUSES[status], loss=loss, born=born, started=started, finished=finished)


_ORIGINS = {int(o): o for o in Origin}
_TAGS = {int(t): t for t in Tag}
_STATUSES = {int(s): s for s in Status}


Handler = Callable[[Tag, int, Any], None]
"""Called for each received message with (tag, source worker, Individual or (id, version))."""


class Mailbox:
    """Non-blocking sends and polling receives on the leaders' communicator."""

    def __init__(self, comm: MPI.Comm, codec: Codec) -> None:
        from mpi4py import MPI

        self._mpi = MPI
        self.comm = comm
        self.codec = codec
        self.size = comm.Get_size()
        self.sent = np.zeros(self.size, dtype=np.int64)
        self.received = np.zeros(self.size, dtype=np.int64)
        self._pending: list[tuple[Any, np.ndarray]] = []
        self._status = MPI.Status()
        self._individual_buf = np.zeros(1, dtype=codec.dtype)
        self._deactivate_buf = np.zeros(1, dtype=DEACTIVATE_DTYPE)

    def send_individual(self, tag: Tag, ind: Individual, to: Iterable[int]) -> None:
        self._send(tag, self.codec.encode(ind), to)

    def send_deactivate(self, ind_id: int, version: int, to: Iterable[int]) -> None:
        rec = np.zeros(1, dtype=DEACTIVATE_DTYPE)
        rec[0] = (ind_id, version)
        self._send(Tag.DEACTIVATE, rec, to)

    def _send(self, tag: Tag, rec: np.ndarray, to: Iterable[int]) -> None:
        # One buffer may back several concurrent sends (MPI-3); it lives until all complete.
        for dest in to:
            req = self.comm.Isend([rec, self._mpi.BYTE], dest=dest, tag=int(tag))
            self._pending.append((req, rec))
            self.sent[dest] += 1
        if len(self._pending) > 64:
            self._reap()

    def _reap(self) -> None:
        self._pending = [(req, buf) for req, buf in self._pending if not req.Test()]

    def poll(self, handle: Handler) -> int:
        """Receive and handle every message that has arrived; returns how many."""
        count = 0
        status = self._status
        while self.comm.Iprobe(source=self._mpi.ANY_SOURCE, tag=self._mpi.ANY_TAG, status=status):
            source, tag = status.Get_source(), _TAGS[status.Get_tag()]
            buf = self._deactivate_buf if tag == Tag.DEACTIVATE else self._individual_buf
            self.comm.Recv([buf, self._mpi.BYTE], source=source, tag=int(tag))
            self.received[source] += 1
            count += 1
            if tag == Tag.DEACTIVATE:
                handle(tag, source, (int(buf[0]["id"]), int(buf[0]["version"])))
            else:
                handle(tag, source, self.codec.decode(buf))
        return count

    def drain(self, handle: Handler, idle: Callable[[], None] = lambda: None) -> None:
        """Finish the exchange: receive everything peers sent us, and complete our sends.

        Collective over the leaders. Counts go through a non-blocking all-to-all while we keep
        receiving, so a peer still evaluating (and still sending to us) is never blocked.
        """
        expected = np.zeros(self.size, dtype=np.int64)
        request = self.comm.Ialltoall([self.sent, self._mpi.INT64_T],
                                      [expected, self._mpi.INT64_T])
        backoff = Backoff()
        counts_known = False
        while True:
            got = self.poll(handle)
            if not counts_known:
                counts_known = bool(request.Test())
            if counts_known and np.array_equal(self.received, expected):
                break
            if got == 0:
                idle()
                backoff.wait()
            else:
                backoff.reset()
        self._mpi.Request.Waitall([req for req, _ in self._pending])
        self._pending.clear()


class Backoff:
    """Exponential back-off for polling loops: reacts within microseconds when busy, yet an
    idle leader sleeps (up to 2 ms), so oversubscribed ranks leave their cores to evaluations."""

    def __init__(self, start: float = 2e-5, limit: float = 2e-3) -> None:
        self.start, self.limit = start, limit
        self.delay = start

    def reset(self) -> None:
        self.delay = self.start

    def wait(self) -> None:
        time.sleep(self.delay)
        self.delay = min(self.delay * 2, self.limit)


def wait_gently(request: MPI.Request) -> None:
    """Wait for a non-blocking operation with :class:`Backoff` instead of MPI's busy polling,
    which on an oversubscribed node takes the cores from ranks that still have work."""
    backoff = Backoff()
    while not request.Test():
        backoff.wait()
