"""The message protocol between worker leaders: tags, wire format, sending, polling, draining.

Nothing else in Atoll touches the leaders' communicator. Messages are fixed-layout binary
records (:class:`Codec`; no pickle on the wire); every send is non-blocking and its buffer is
kept until the send completes, so no leader ever blocks on a busy peer. Receives stay posted,
so one call collects whatever arrived. Termination is exact: leaders
exchange how many messages each sent to each other (a non-blocking all-to-all) and keep
receiving until every one of them has arrived, so nothing is lost and nothing hangs.
"""

from __future__ import annotations

import struct
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from enum import IntEnum
from typing import TYPE_CHECKING, Any

import numpy as np

from atoll.backoff import Backoff
from atoll.individual import FIELDS, Individual, fields_of, from_fields
from atoll.space import CategoricalParam, FloatParam, IntParam, Space

if TYPE_CHECKING:
    from mpi4py import MPI

Buffer = bytes | bytearray | memoryview


class Tag(IntEnum):
    """What a message carries."""

    RESULT = 1  # an evaluated individual, for every other worker of its island
    MIGRANT = 2  # an individual arriving on another island (moved or copied)
    DEACTIVATE = 3  # an individual that left this island: mark that copy inactive
    CURVE = 4  # part of a completed individual's per-epoch metric, for the island's schedulers
    STARTED = 5  # a candidate a partner began to evaluate: not a result, so none breeds it too
    ASK_SHARE = 6  # a worker that spent its share of the budget asks its island partners
    SHARE = 7  # the answer: evaluations of the budget given (0 or more)
    OUT = 8  # a worker stops: ask it no more (:mod:`atoll.engine.sharing`)
    SPENT = 9  # a worker has begun the last of its share: it has none to give, ask it not
    SPARE = 10  # a worker that said SPENT was given more than it begins at once: ask it again


COUNTED = frozenset({Tag.ASK_SHARE, Tag.SHARE, Tag.OUT, Tag.SPENT, Tag.SPARE})
"""Tags whose message is one count (an int)."""


# The wire format of an individual: little-endian, packed, the individual's FIELDS in their
# order, its owner, then one field per parameter (floats as f8, ints as i8, categoricals and
# ordinals as the i4 index of the choice).
_CODES = {"i8": "q", "i4": "i", "i1": "b", "f8": "d"}
_FIXED = "".join(_CODES[kind] for _, kind in FIELDS) + "i"  # + owner

_DEACTIVATE = struct.Struct("<qi")  # id, version
_CURVE_HEAD = struct.Struct("<qi")  # id, points in this part
_COUNT = struct.Struct("<q")
_POINT = struct.Struct("<id")  # epoch, value
CURVE_POINTS = 32
"""Points per curve message: a longer curve travels in parts, each learned as it arrives."""
_CURVE_SIZE = _CURVE_HEAD.size + CURVE_POINTS * _POINT.size
RECEIVE_SLOTS = 64  # receives kept posted per leader (at most one per other leader)
QUIET_SECONDS = 0.05  # a poll this long after the last one looks twice if it finds nothing


class Codec:
    """Turns individuals into fixed-size records and back; categoricals travel as indices.

    Records are packed with :mod:`struct`: lighter than building numpy records, which counts
    because a leader encodes and decodes several per evaluation.
    """

    def __init__(self, space: Space) -> None:
        codes = _FIXED + "".join(
            "d" if isinstance(p, FloatParam) else "q" if isinstance(p, IntParam) else "i"
            for p in space.params)
        self.record = struct.Struct("<" + codes)
        self.size = self.record.size
        # Each parameter's name and its choices (None: the value travels as it is).
        self._genes = tuple((p.name, p.choices if isinstance(p, CategoricalParam) else None)
                            for p in space.params)
        self._index = {p.name: {v: i for i, v in enumerate(p.choices)} for p in space.params
                       if isinstance(p, CategoricalParam)}

    def encode(self, ind: Individual) -> bytes:
        params = ind.params
        genes = [params[name] if choices is None else self._index[name][params[name]]
                 for name, choices in self._genes]
        return self.record.pack(*fields_of(ind), ind.owner, *genes)

    def decode(self, buf: Buffer) -> Individual:
        values = self.record.unpack_from(buf)
        genes = values[_OWNER + 1:]
        ind = from_fields(values[:_OWNER], {
            name: value if choices is None else choices[value]
            for (name, choices), value in zip(self._genes, genes, strict=True)})
        ind.owner = values[_OWNER]
        return ind


_OWNER = len(FIELDS)  # the owner's place in a message, after the individual's FIELDS


def curve_parts(ind_id: int, curve: Sequence[tuple[int, float]]) -> list[bytes]:
    """``curve`` as fixed-size messages of at most CURVE_POINTS points each."""
    parts = []
    for start in range(0, len(curve), CURVE_POINTS):
        points = curve[start:start + CURVE_POINTS]
        buf = bytearray(_CURVE_SIZE)
        _CURVE_HEAD.pack_into(buf, 0, ind_id, len(points))
        for k, (epoch, value) in enumerate(points):
            _POINT.pack_into(buf, _CURVE_HEAD.size + k * _POINT.size, epoch, value)
        parts.append(bytes(buf))
    return parts


def curve_of(buf: Buffer) -> tuple[int, list[tuple[int, float]]]:
    ind_id, count = _CURVE_HEAD.unpack_from(buf)
    return ind_id, [_POINT.unpack_from(buf, _CURVE_HEAD.size + k * _POINT.size)
                    for k in range(count)]


_TAGS = {int(t): t for t in Tag}


Handler = Callable[[Tag, int, Any], None]
"""Called for each received message with (tag, source worker, payload): an Individual, (id,
version) for DEACTIVATE, (id, [(epoch, value), ...]) for CURVE, an int for the COUNTED tags."""


class MpiMailbox:
    """Non-blocking sends and polling receives on the leaders' communicator."""

    def __init__(self, comm: MPI.Comm, codec: Codec) -> None:
        from mpi4py import MPI

        self._mpi = MPI
        self.comm = comm
        self.codec = codec
        self.size = comm.Get_size()
        self.sent = [0] * self.size  # messages to / from each leader, for the final drain
        self.received = [0] * self.size
        self._pending: list[tuple[Any, bytes]] = []
        # Receives stay posted (persistent, from any leader), so one Testsome per poll
        # collects everything that arrived: probing until nothing is left costs an extra
        # trip through MPI's progress engine each time, which showed as most of a leader's
        # time between evaluations. A message matches the earliest posted receive, so sorting
        # completed ones by when they were posted gives the arrival order.
        slots = min(self.size - 1, RECEIVE_SLOTS)
        self._buffers = [bytearray(max(codec.size, _DEACTIVATE.size, _CURVE_SIZE))
                         for _ in range(slots)]
        self._receives = [comm.Recv_init([buf, MPI.BYTE], source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG)
                          for buf in self._buffers]
        self._posted = list(range(slots))
        self._posts = slots
        self._arrived: deque[tuple[Tag, int, Any]] = deque()  # received, not yet handled
        self._polled = time.monotonic()  # when the last poll ended
        if self._receives:
            MPI.Prequest.Startall(self._receives)

    def send_individual(self, tag: Tag, ind: Individual, to: Iterable[int]) -> None:
        self._send(tag, self.codec.encode(ind), to)

    def send_deactivate(self, ind_id: int, version: int, to: Iterable[int]) -> None:
        self._send(Tag.DEACTIVATE, _DEACTIVATE.pack(ind_id, version), to)

    def send_count(self, tag: Tag, count: int, to: Iterable[int]) -> None:
        self._send(tag, _COUNT.pack(count), to)

    def send_curve(self, ind_id: int, curve: Sequence[tuple[int, float]],
                   to: Iterable[int]) -> None:
        targets = list(to)
        for part in curve_parts(ind_id, curve):
            self._send(Tag.CURVE, part, targets)

    def _send(self, tag: Tag, rec: bytes, to: Iterable[int]) -> None:
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
        """Handle every message whose receive has completed; returns how many.

        Open MPI moves messages along inside any MPI call, but Testsome does so only after it
        found nothing complete, so what arrived since the last MPI call completes only in
        the next one. After a quiet spell (an evaluation longer than QUIET_SECONDS) a poll
        that finds nothing therefore looks once more, lest an answer wait a whole evaluation
        more; after a short one the next poll comes soon enough, and each look that finds
        nothing yields the core on a crowded node.
        """
        count = 0
        self._handle_arrived(handle)  # what an earlier poll's failing handler left
        quiet = time.monotonic() - self._polled > QUIET_SECONDS
        while self._receives:
            statuses: list[Any] = []
            done = self._mpi.Request.Testsome(self._receives, statuses)
            if not done and quiet:
                quiet = False  # that call only moved messages along
                done = self._mpi.Request.Testsome(self._receives, statuses)
            if not done:
                break
            # Every completed receive is read, posted again and counted before any is
            # handled: a handler that raises (or a signal in one) leaves no receive idle
            # and no message uncounted, so the drain's counts still meet.
            for k in sorted(range(len(done)), key=lambda k: self._posted[done[k]]):
                slot, status = done[k], statuses[k]
                source, tag = status.Get_source(), _TAGS[status.Get_tag()]
                buf = self._buffers[slot]
                payload = _DEACTIVATE.unpack_from(buf) if tag == Tag.DEACTIVATE \
                    else curve_of(buf) if tag == Tag.CURVE \
                    else _COUNT.unpack_from(buf)[0] if tag in COUNTED else self.codec.decode(buf)
                self._receives[slot].Start()
                self._posted[slot], self._posts = self._posts, self._posts + 1
                self.received[source] += 1
                self._arrived.append((tag, source, payload))
            count += len(done)
            self._handle_arrived(handle)
            if len(done) < len(self._receives):
                break
        self._polled = time.monotonic()
        return count

    def _handle_arrived(self, handle: Handler) -> None:
        while self._arrived:
            handle(*self._arrived.popleft())

    def drain(self, handle: Handler, idle: Callable[[], None] = lambda: None) -> None:
        """Finish the exchange: receive everything peers sent us, and complete our sends.

        Collective over the leaders. Counts go through a non-blocking all-to-all while we keep
        receiving, so a peer still evaluating (and still sending to us) is never blocked.
        """
        sent = np.array(self.sent, dtype=np.int64)
        expected = np.zeros(self.size, dtype=np.int64)
        request = self.comm.Ialltoall([sent, self._mpi.INT64_T], [expected, self._mpi.INT64_T])
        backoff = Backoff()
        counts_known = False
        while True:
            got = self.poll(handle)
            if not counts_known:
                counts_known = bool(request.Test())
            if counts_known and self.received == expected.tolist():
                break
            if got == 0:
                idle()
                backoff.wait()
            else:
                backoff.reset()
        self._mpi.Request.Waitall([req for req, _ in self._pending])
        self._pending.clear()
        for request in self._receives:  # nothing more can arrive: withdraw the receives
            request.Cancel()
        self._mpi.Request.Waitall(self._receives)
        for request in self._receives:
            request.Free()
        self._receives = []
