"""What leaders receive through ``atoll.engine.protocol.MpiMailbox``, for tests/test_protocol.py.

    mpirun -n RANKS python tests/mpi_programs/mailbox_checks.py OUT.json BURST

Every rank sends BURST individuals and BURST // 3 deactivations to every other rank in bursts
(far more than the receives a leader keeps posted), polling only now and then, then drains.
Rank 0 writes what each rank received, in order, to OUT.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mpi4py import MPI

from atoll.engine.protocol import Codec, MpiMailbox, Tag
from atoll.individual import Individual, Status
from atoll.space import Space

SPACE = Space.from_dict({"x": {"type": "float", "low": -1.0, "high": 1.0},
                         "act": {"type": "categorical", "choices": ["relu", "tanh"]}})


def main() -> None:
    out, burst = Path(sys.argv[1]), int(sys.argv[2])
    comm = MPI.COMM_WORLD
    me, size = comm.Get_rank(), comm.Get_size()
    others = [r for r in range(size) if r != me]
    mailbox = MpiMailbox(comm, Codec(SPACE))
    got: list[list[object]] = []

    def handle(tag: Tag, source: int, payload: object) -> None:
        if tag == Tag.DEACTIVATE:
            got.append([source, "deactivate", *payload])  # type: ignore[misc]
        else:
            assert isinstance(payload, Individual)
            got.append([source, tag.name, payload.id, payload.params["x"],
                        payload.params["act"], payload.status.name, payload.version])

    for n in range(burst):
        params = {"x": n / burst, "act": ("relu", "tanh")[n % 2]}
        ind = Individual(id=me * 1_000_000 + n, params=params, version=n % 5,
                         status=(Status.OK, Status.FAILED)[n % 2])
        mailbox.send_individual(Tag.RESULT if n % 2 else Tag.MIGRANT, ind, others)
        if n % 3 == 0:
            mailbox.send_deactivate(me * 1_000_000 + n, n % 5, others)
        if n % 50 == 0:
            mailbox.poll(handle)
    mailbox.drain(handle)
    everything = comm.gather(got, root=0)
    if me == 0:
        out.write_text(json.dumps(everything))


if __name__ == "__main__":
    main()
