"""The leaders' wire format and mailbox: a round trip through the codec, and a real mpirun in
which bursts of messages exceed the receives each leader keeps posted."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from atoll.engine.protocol import Codec
from atoll.individual import Individual, Origin, Status
from atoll.space import Space
from conftest import ROOT, mpirun_cmd, run

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


@pytest.mark.parametrize("ranks", [2, 4])
def test_bursts_arrive_complete_and_in_order_from_each_sender(tmp_path: Path, ranks: int) -> None:
    burst = 400
    out = tmp_path / "got.json"
    done = run(mpirun_cmd(ranks, str(ROOT / "tests" / "mpi_programs" / "mailbox_checks.py"),
                          str(out), str(burst)), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    received = json.loads(out.read_text())
    for me, messages in enumerate(received):
        for source in (r for r in range(ranks) if r != me):
            mine = [m for m in messages if m[0] == source]
            individuals = [m for m in mine if m[1] != "deactivate"]
            deactivations = [m for m in mine if m[1] == "deactivate"]
            # all of them, once each, in the order the sender sent them (MPI keeps the order
            # of one sender's messages; the mailbox must not lose it)
            assert [m[2] for m in individuals] == [source * 1_000_000 + n for n in range(burst)]
            assert [m[2] for m in deactivations] == [source * 1_000_000 + n
                                                     for n in range(0, burst, 3)]
            positions = {(m[1] == "deactivate", m[2]): i for i, m in enumerate(mine)}
            for n in range(0, burst, 3):  # a deactivation follows its individual
                ident = source * 1_000_000 + n
                assert positions[(False, ident)] < positions[(True, ident)]
            for n, m in enumerate(individuals):
                assert m[1] == ("MIGRANT", "RESULT")[n % 2]
                assert m[3] == n / burst and m[4] == ("relu", "tanh")[n % 2]
                assert m[5] == ("OK", "FAILED")[n % 2] and m[6] == n % 5
