"""One poll after a quiet spell, for tests/test_protocol.py.

    mpirun -n 2 python tests/mpi_programs/quiet_poll.py OUT.json QUIET

Rank 1 sends rank 0 one message while rank 0 makes no MPI call for QUIET seconds (as in a long
evaluation); rank 0 then polls once and writes how many messages that one poll handled.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from mpi4py import MPI

from atoll.engine.protocol import Codec, MpiMailbox, Tag
from mailbox_contract import SPACE, Inbox


def main() -> None:
    out, quiet = Path(sys.argv[1]), float(sys.argv[2])
    comm = MPI.COMM_WORLD
    mailbox, inbox = MpiMailbox(comm, Codec(SPACE)), Inbox()
    comm.Barrier()
    seen = 0
    if comm.Get_rank() == 1:
        mailbox.send_count(Tag.ASK_SHARE, 0, [0])
    else:
        time.sleep(quiet)
        seen = mailbox.poll(inbox)
    mailbox.drain(inbox)
    if comm.Get_rank() == 0:
        out.write_text(json.dumps({"first_poll": seen, "all": len(inbox.got)}))


if __name__ == "__main__":
    main()
