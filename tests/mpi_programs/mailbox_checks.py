"""tests/mailbox_contract.py's exchange through ``atoll.engine.protocol.MpiMailbox``, for
tests/test_protocol.py.

    mpirun -n RANKS python tests/mpi_programs/mailbox_checks.py OUT.json BURST

Every rank sends its burst to every other rank, then drains. Rank 0 writes what each rank
received, in order, to OUT.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mpi4py import MPI

from atoll.engine.protocol import Codec, MpiMailbox
from mailbox_contract import SPACE, Inbox, send_burst


def main() -> None:
    out, burst = Path(sys.argv[1]), int(sys.argv[2])
    comm = MPI.COMM_WORLD
    me, size = comm.Get_rank(), comm.Get_size()
    mailbox, inbox = MpiMailbox(comm, Codec(SPACE)), Inbox()
    send_burst(mailbox, me, [r for r in range(size) if r != me], burst, inbox)
    mailbox.drain(inbox)
    everything = comm.gather(inbox.got, root=0)
    if me == 0:
        out.write_text(json.dumps(everything))


if __name__ == "__main__":
    main()
