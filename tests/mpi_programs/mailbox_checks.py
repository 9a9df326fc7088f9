"""tests/mailbox_contract.py's exchange through ``atoll.engine.protocol.MpiMailbox``, for
tests/test_protocol.py.

    mpirun -n RANKS python tests/mpi_programs/mailbox_checks.py OUT.json BURST [LATE [FAIL]]

Every rank sends its burst to every other rank, then drains; with LATE seconds, the last rank
starts that much later than the others, which drain meanwhile (a leader still evaluating while
the others have finished); with FAIL = N, the handling of every Nth message during the burst
raises. Rank 0 writes what each rank received, in order, to OUT.json.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from mpi4py import MPI

from atoll.engine.protocol import Codec, MpiMailbox
from mailbox_contract import SPACE, Inbox, send_burst


def main() -> None:
    out, burst = Path(sys.argv[1]), int(sys.argv[2])
    late = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    fail = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    comm = MPI.COMM_WORLD
    me, size = comm.Get_rank(), comm.Get_size()
    mailbox, inbox = MpiMailbox(comm, Codec(SPACE)), Inbox(fail)
    if me == size - 1:
        time.sleep(late)
    send_burst(mailbox, me, [r for r in range(size) if r != me], burst, inbox)
    inbox.fail_every = 0
    mailbox.drain(inbox)
    everything = comm.gather(inbox.got, root=0)
    if me == 0:
        out.write_text(json.dumps(everything))


if __name__ == "__main__":
    main()
