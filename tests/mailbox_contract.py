"""What every mailbox (atoll.engine.protocol.MpiMailbox, atoll.engine.memory.MemoryMailbox)
must do, as one exchange and one check: tests/test_protocol.py runs it on both."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from atoll.engine.island import Mailbox
from atoll.engine.protocol import COUNTED, Tag
from atoll.individual import Individual, Status
from atoll.space import Space

SPACE = Space.from_dict({"x": {"type": "float", "low": -1.0, "high": 1.0},
                         "act": {"type": "categorical", "choices": ["relu", "tanh"]}})


CARRY_INDIVIDUALS = (Tag.MIGRANT, Tag.RESULT, Tag.STARTED)
CARRY_COUNTS = tuple(sorted(COUNTED))


class HandlerFailed(Exception):
    """What an :class:`Inbox` told to fail raises (as a message's handler may, in a job)."""


class Inbox:
    """What one leader received, in order, as plain JSON-able rows; with ``fail_every`` = N,
    its handling of every Nth message raises :class:`HandlerFailed` once it kept the row."""

    def __init__(self, fail_every: int = 0) -> None:
        self.got: list[list[Any]] = []
        self.fail_every = fail_every

    def __call__(self, tag: Tag, source: int, payload: Any) -> None:
        self._keep(tag, source, payload)
        if self.fail_every and len(self.got) % self.fail_every == 0:
            raise HandlerFailed(f"message {len(self.got)}")

    def _keep(self, tag: Tag, source: int, payload: Any) -> None:
        if tag == Tag.DEACTIVATE:
            self.got.append([source, "deactivate", *payload])
        elif tag in COUNTED:
            assert isinstance(payload, int)
            self.got.append([source, "count", tag.name, payload])
        else:
            assert isinstance(payload, Individual)
            self.got.append([source, tag.name, payload.id, payload.params["x"],
                             payload.params["act"], payload.status.name, payload.version])


def send_burst(mailbox: Mailbox, me: int, others: Sequence[int], burst: int,
               inbox: Inbox) -> None:
    """``burst`` individuals, ``burst // 3`` deactivations and ``burst // 7`` counts to every
    other leader, polling only now and then (far more than the receives a leader keeps
    posted)."""
    for n in range(burst):
        params = {"x": n / burst, "act": ("relu", "tanh")[n % 2]}
        ind = Individual(id=me * 1_000_000 + n, params=params, version=n % 5,
                         status=(Status.OK, Status.FAILED)[n % 2])
        mailbox.send_individual(CARRY_INDIVIDUALS[n % 3], ind, others)
        if n % 3 == 0:
            mailbox.send_deactivate(me * 1_000_000 + n, n % 5, others)
        if n % 7 == 0:
            mailbox.send_count(CARRY_COUNTS[n % 3], me * 1_000_000 + n, others)
        if n % 50 == 0:
            try:
                mailbox.poll(inbox)
            except HandlerFailed:
                pass  # the messages after it are handled by the next poll


def check_received(received: Sequence[Sequence[Sequence[Any]]], leaders: int,
                   burst: int) -> None:
    """Every message once, in the order its sender sent it, with every field intact; a
    deactivation after the individual it refers to."""
    for me, messages in enumerate(received):
        for source in (r for r in range(leaders) if r != me):
            mine = [m for m in messages if m[0] == source]
            individuals = [m for m in mine if m[1] not in ("deactivate", "count")]
            deactivations = [m for m in mine if m[1] == "deactivate"]
            counts = [m[2:] for m in mine if m[1] == "count"]
            assert counts == [[CARRY_COUNTS[n % 3].name, source * 1_000_000 + n]
                              for n in range(0, burst, 7)]
            assert [m[2] for m in individuals] == [source * 1_000_000 + n for n in range(burst)]
            assert [m[2] for m in deactivations] == [source * 1_000_000 + n
                                                     for n in range(0, burst, 3)]
            positions = {(m[1] == "deactivate", m[2]): i for i, m in enumerate(mine)}
            for n in range(0, burst, 3):
                ident = source * 1_000_000 + n
                assert positions[(False, ident)] < positions[(True, ident)]
            for n, m in enumerate(individuals):
                assert m[1] == CARRY_INDIVIDUALS[n % 3].name
                assert m[3] == n / burst and m[4] == ("relu", "tanh")[n % 2]
                assert m[5] == ("OK", "FAILED")[n % 2] and m[6] == n % 5
