"""The leaders' wire format and mailbox: a round trip through the codec, and a real mpirun in
which bursts of messages exceed the receives each leader keeps posted."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from atoll.engine.memory import MemoryPost
from atoll.engine.protocol import Codec
from atoll.individual import Individual, Origin, Status
from atoll.space import Space
from conftest import ROOT, mpirun_cmd, run
from mailbox_contract import Inbox, check_received, send_burst

MIXED = Space.from_dict({
    "lr": {"type": "float", "low": 1e-5, "high": 1.0, "log": True},
    "layers": {"type": "int", "low": -3, "high": 2**40},
    "act": {"type": "categorical", "choices": ["relu", "tanh", "gelü"]},
    "flag": {"type": "categorical", "choices": [True, False]},
    "batch": {"type": "ordinal", "values": [16, 32, 64]},
})


@pytest.mark.parametrize("loss,status", [(0.25, Status.OK), (math.nan, Status.FAILED)])
def test_codec_round_trip_keeps_every_field(loss: float, status: Status) -> None:
    ind = Individual(id=2**40 + 3, params={"lr": 3e-4, "layers": 2**40, "act": "gelü",
                                           "flag": False, "batch": 64},
                     island=3, worker=17, generation=99, owner=5, version=7, parents=(11, -1),
                     origin=Origin.GA, loss=loss, status=status, born=1.5, started=2.25,
                     finished=3.125)
    codec = Codec(MIXED)
    wire = codec.encode(ind)
    assert len(wire) == codec.size
    back = codec.decode(bytearray(wire))
    for name in ("id", "island", "worker", "generation", "owner", "version", "parents",
                 "origin", "status", "born", "started", "finished", "params"):
        assert getattr(back, name) == getattr(ind, name), name
    assert type(back.params["flag"]) is bool and type(back.params["layers"]) is int
    assert back.loss == loss or (math.isnan(back.loss) and math.isnan(loss))
    assert back.origin is Origin.GA and back.status is status


@pytest.mark.parametrize(("ranks", "late", "fail"), [(2, 0.0, 0), (4, 0.0, 0), (3, 1.0, 0),
                                                   (3, 0.0, 7)])
def test_bursts_arrive_complete_and_in_order_from_each_sender(tmp_path: Path, ranks: int,
                                                              late: float, fail: int) -> None:
    """``late``: the last leader sends its burst that many seconds after the others began
    to drain; they wait for it, and nothing it sends is lost. ``fail``: the handling of every
    such message raises during the burst (a handler's error, a signal in it): the messages
    after it are handled by the next poll, and the drain's counts still meet."""
    burst = 400
    out = tmp_path / "got.json"
    done = run(mpirun_cmd(ranks, str(ROOT / "tests" / "mpi_programs" / "mailbox_checks.py"),
                          str(out), str(burst), str(late), str(fail)), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    check_received(json.loads(out.read_text()), ranks, burst)


@pytest.mark.parametrize("leaders", [2, 4])
def test_the_memory_mailbox_keeps_the_same_contract(leaders: int) -> None:
    """The in-memory mailbox the one-process harnesses use passes the same checks."""
    burst = 400
    post = MemoryPost(leaders)
    inboxes = [Inbox() for _ in range(leaders)]
    for me in range(leaders):
        send_burst(post.mailbox(me), me, [r for r in range(leaders) if r != me], burst,
                   inboxes[me])
    for me in range(leaders):
        post.mailbox(me).drain(inboxes[me])
    check_received([inbox.got for inbox in inboxes], leaders, burst)


def test_one_poll_after_a_quiet_spell_sees_what_arrived_during_it(tmp_path: Path) -> None:
    """Open MPI completes a receive only inside an MPI call, and Testsome makes that call
    only after it found nothing: a leader back from a long evaluation (no MPI call meanwhile)
    must still see, in its one poll before the next step, the ask that came during it."""
    out = tmp_path / "got.json"
    done = run(mpirun_cmd(2, str(ROOT / "tests" / "mpi_programs" / "quiet_poll.py"), str(out),
                          "0.3"), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(out.read_text()) == {"first_poll": 1, "all": 1}
