"""The no-optimizer control, run under mpirun from Atoll's venv:
python control_side.py TASKS.json OUT.json

Every rank just calls the same sleeping objective ``evals_per_worker`` times on a fixed point,
timed the same way as the optimizers (barrier, loop, barrier). It shows what the machine itself
costs: oversubscribed ranks, sleep granularity, MPI's own progress threads.
"""

from __future__ import annotations

import time
from typing import Any

from mpi4py import MPI
from side import serve

from objectives import Options, sleep_objective, space


def run(task: dict[str, Any], comm: MPI.Comm) -> dict[str, Any]:
    params = {name: (low + high) / 2 for name, (low, high) in space(task["function"]).items()}
    ctx = Options(function=task["function"], sleep=task["sleep"])
    seconds = 0.0
    comm.Barrier()
    start = time.time()
    for _ in range(task["evals_per_worker"]):
        t = time.time()
        sleep_objective(params, ctx)
        seconds += time.time() - t
    comm.Barrier()
    wall = time.time() - start
    return {"evaluations": comm.reduce(task["evals_per_worker"]), "wall": wall,
            "objective_seconds": comm.reduce(seconds), "ranks": comm.Get_size()}


if __name__ == "__main__":
    serve(run)
