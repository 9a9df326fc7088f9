"""The frame every side script shares (atoll_side, propulate_side, optuna_side, control_side):
``python SIDE.py TASKS.json OUT.json`` under mpirun runs the tasks one after the other in the
same processes, and rank 0 writes one result per task. The standard library and mpi4py only, so
that it runs in every side's venv.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mpi4py import MPI


def serve(run: Callable[[dict[str, Any], MPI.Comm], dict[str, Any] | None]) -> None:
    """Run every task of argv[1] on all ranks; rank 0 writes the results to argv[2]."""
    tasks = json.loads(Path(sys.argv[1]).read_text())
    comm = MPI.COMM_WORLD
    results = [run(task, comm) for task in tasks]
    if comm.Get_rank() == 0:
        Path(sys.argv[2]).write_text(json.dumps(results))


class Spent:
    """One rank's objective calls, their time and the best loss, counted around each call."""

    def __init__(self) -> None:
        self.seconds, self.calls, self.best = 0.0, 0, math.inf

    def call(self, objective: Callable[..., float], *args: Any) -> float:
        start = time.time()
        loss = objective(*args)
        self.seconds += time.time() - start
        self.calls += 1
        self.best = min(self.best, loss)
        return loss

    def result(self, comm: MPI.Comm, wall: float) -> dict[str, Any]:
        """The task's result as every side reports it (sums and the minimum over ranks)."""
        return {"evaluations": comm.reduce(self.calls), "wall": wall,
                "objective_seconds": comm.reduce(self.seconds),
                "best": comm.reduce(self.best, op=MPI.MIN), "ranks": comm.Get_size()}
