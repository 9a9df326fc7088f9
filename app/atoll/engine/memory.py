"""The island loop without MPI: an in-memory mailbox and recorder, so that one process drives
several loops in a schedule of its choosing (the tests, the benchmarks' island-model harness).
The mailbox keeps :class:`~atoll.engine.protocol.MpiMailbox`'s contract (tests/mailbox_contract.py
runs the same checks against both)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from atoll.engine.island import Mailbox
from atoll.engine.protocol import Handler, Tag, curve_of, curve_parts
from atoll.individual import Individual

Message = tuple[Tag, int, Any]


class MemoryPost:
    """The inboxes of ``workers`` leaders; a message is delivered the moment it is sent."""

    def __init__(self, workers: int) -> None:
        self.inboxes: list[list[Message]] = [[] for _ in range(workers)]

    def mailbox(self, worker: int) -> Mailbox:
        return MemoryMailbox(self, worker)


@dataclass
class MemoryMailbox:
    """One leader's side of a :class:`MemoryPost`. Individuals travel as copies, as a decoded
    message would."""

    post: MemoryPost
    me: int

    def send_individual(self, tag: Tag, ind: Individual, to: Iterable[int]) -> None:
        for dest in to:
            self.post.inboxes[dest].append((tag, self.me, replace(ind, params=dict(ind.params))))

    def send_deactivate(self, ind_id: int, version: int, to: Iterable[int]) -> None:
        for dest in to:
            self.post.inboxes[dest].append((Tag.DEACTIVATE, self.me, (ind_id, version)))

    def send_count(self, tag: Tag, count: int, to: Iterable[int]) -> None:
        for dest in to:
            self.post.inboxes[dest].append((tag, self.me, count))

    def send_curve(self, ind_id: int, curve: Sequence[tuple[int, float]],
                   to: Iterable[int]) -> None:
        """In parts, as on the wire."""
        targets = list(to)
        for part in curve_parts(ind_id, curve):
            for dest in targets:
                self.post.inboxes[dest].append((Tag.CURVE, self.me, curve_of(part)))

    def poll(self, handle: Handler) -> int:
        arrived, self.post.inboxes[self.me] = self.post.inboxes[self.me], []
        for message in arrived:
            handle(*message)
        return len(arrived)

    def drain(self, handle: Handler) -> None:
        """Everything sent so far has arrived: drain is one poll (the caller lets every other
        loop finish sending first)."""
        self.poll(handle)


@dataclass
class MemoryRecorder:
    """Keeps what a worker log would write."""

    individuals: list[Individual] = field(default_factory=list)
    migrations: list[tuple[Any, ...]] = field(default_factory=list)
    flushes: int = 0

    def add_individual(self, ind: Individual) -> None:
        self.individuals.append(ind)

    def add_migration(self, *row: Any) -> None:
        self.migrations.append(row)

    def maybe_flush(self, now: float | None = None) -> bool:
        return False

    def flush(self) -> None:
        self.flushes += 1
