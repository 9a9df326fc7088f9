"""Propulate's side, run under mpirun from benchmarks/.venv-propulate:
python propulate_side.py TASKS.json OUT.json

Each task is one ``propulate.Islands`` run with Propulate's default propagator
(``get_default_propagator`` with its default probabilities), real migration
(``pollination=False``), the task's ``run_dir`` as checkpoint directory (Propulate pickles the
island's population there every generation), and one random stream per seed and rank
(``random.Random("seed:rank")``; see ``run`` for why not the tutorials' ``seed + rank``).
Wall time is measured like Atoll's: between barriers around ``propulate()``; objective time
is summed in the loss wrapper.
"""

from __future__ import annotations

import random
import time
from typing import Any

from mpi4py import MPI
from propulate import Islands
from propulate.utils import get_default_propagator
from side import Spent, serve

from objectives import Options, sleep_objective, space


def run(task: dict[str, Any], comm: MPI.Comm) -> dict[str, Any]:
    limits = space(task["function"], task.get("dims"))
    ctx = Options(function=task["function"], sleep=task["sleep"])
    spent = Spent()

    def loss_fn(ind: Any) -> float:
        return spent.call(sleep_objective, ind, ctx)

    # Not Propulate's tutorial seeding (seed + rank): with it, seed s on rank r draws the same
    # stream as seed s + 1 on rank r - 1, so a sweep over consecutive seeds reuses streams and
    # its runs are not independent samples. A string seed gives every (seed, rank) its own.
    rng = random.Random(f"{task['seed']}:{comm.Get_rank()}")
    propagator = get_default_propagator(task["pop_size"], limits, rng=rng)
    islands = Islands(
        loss_fn, propagator, rng, generations=task["evals_per_worker"],
        num_islands=task["islands"], migration_probability=task["propulate_migration"],
        pollination=False, checkpoint_path=task["run_dir"])
    comm.Barrier()
    start = time.time()
    islands.propulate(debug=0)
    comm.Barrier()
    return spent.result(comm, time.time() - start)


if __name__ == "__main__":
    serve(run)
