"""How often ``atoll.engine.stopping.StopFlag`` probes, and that a notice still arrives, for
tests/test_stopping.py.

    mpirun -n 2 python tests/mpi_programs/stop_checks.py OUT.json

Both ranks ask ``requested()`` many times in a tight loop while the real communicator counts
the probes; then rank 1 asks to stop and rank 0 waits until it sees the notice. Rank 0 writes
what each rank counted to OUT.json. Then, ROUNDS times with a fresh flag, rank 1 asks to stop,
both ranks agree on it as the two ranks of one worker do, and each rank counts the rounds in
which its own ``requested()`` said so right after (rank 0's probe may not have seen the notice).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from mpi4py import MPI

from atoll.engine.stopping import StopFlag

CALLS = 20_000
ROUNDS = 50


class CountingComm:
    """The flag's real communicator, counting the probes that go through it."""

    def __init__(self, comm: MPI.Comm) -> None:
        self.comm = comm
        self.probes = 0

    def Iprobe(self, *args: Any, **kwargs: Any) -> bool:  # noqa: N802 - mpi4py's name
        self.probes += 1
        return self.comm.Iprobe(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.comm, name)


def main() -> None:
    out = Path(sys.argv[1])
    world = MPI.COMM_WORLD
    flag = StopFlag(world)
    counting = CountingComm(flag.comm)
    flag.comm = counting  # type: ignore[assignment]
    start = time.time()
    early = any([flag.requested() for _ in range(CALLS)])
    elapsed = time.time() - start
    probes = counting.probes
    world.Barrier()
    seen = False
    if world.Get_rank() == 1:
        flag.request("test")
        seen = flag.requested()
    else:
        deadline = time.time() + 20
        while not seen and time.time() < deadline:
            seen = flag.requested()
            time.sleep(1e-4)
    stopped = flag.close()
    facts = world.gather({"probes": probes, "elapsed": elapsed, "early": early, "seen": seen,
                          "stopped": stopped, "kept_after_agreeing": agreement_rounds(world)},
                         root=0)
    if world.Get_rank() == 0:
        out.write_text(json.dumps(facts))


def agreement_rounds(world: MPI.Comm) -> int:
    """Rounds in which this rank agreed to stop and its next ``requested()`` said so too."""
    kept = 0
    for _ in range(ROUNDS):
        flag = StopFlag(world)
        flag.requested()  # a probe that finds nothing: the next one waits PROBE_INTERVAL
        world.Barrier()
        if world.Get_rank() == 1:
            flag.request("test")
        kept += flag.agreed(world) and flag.requested()
        flag.close()
    return kept


if __name__ == "__main__":
    main()
