"""Atoll's side, run under mpirun from Atoll's venv: python atoll_side.py TASKS.json OUT.json

Each task is one search through the Python API (``atoll.search``) with default recording (HDF5
worker logs, flush_interval 5 s) into the task's ``run_dir``. Wall and objective time are
Atoll's own (JobSummary.wall_seconds between the barriers around the search loop,
JobSummary.objective_seconds summed over workers). The best loss, the number of recorded
individuals and the median time between a worker's evaluations are read back from the record
afterwards (not timed).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from mpi4py import MPI
from side import serve

from atoll.api import search
from atoll.config import parse_config
from atoll.record import read_completed
from objectives import space_table


def with_ints(space: dict[str, dict[str, Any]], ints: int) -> dict[str, dict[str, Any]]:
    """``space`` with its last ``ints`` parameters integers within the same bounds (a lattice
    to CMA-ES, which searches them with margin)."""
    names = list(space)[len(space) - ints:] if ints else []
    return {name: ({"type": "int", "low": math.ceil(table["low"]),
                    "high": math.floor(table["high"])} if name in names else table)
            for name, table in space.items()}


def config_table(task: dict[str, Any]) -> dict[str, Any]:
    """The whole config of one task; everything not listed is Atoll's default. A task may set
    ``dims`` (the function's dimensions), ``ints`` (how many of them are integers) and
    ``evolution`` (Atoll's ``[evolution]`` table)."""
    return {
        "seed": task["seed"],
        "objective": {"name": "objectives:sleep_objective",
                      "options": {"function": task["function"], "sleep": task["sleep"]}},
        "space": with_ints(space_table(task["function"], task.get("dims")), task.get("ints", 0)),
        "search": {"generations": task["evals_per_worker"], "islands": task["islands"]},
        "migration": {"mode": "migration", "probability": task["migration_probability"],
                      "migrants": 1},
        "evolution": task.get("evolution", {}),
    }


def between_evaluations(individuals: np.ndarray) -> float:
    """Median seconds from the end of one evaluation to the start of the same worker's next:
    the island loop's own time per evaluation, without the job's start and end."""
    gaps = []
    for worker in np.unique(individuals["worker"]):
        mine = individuals[individuals["worker"] == worker]
        mine = mine[np.argsort(mine["started"])]
        gaps.append(mine["started"][1:] - mine["finished"][:-1])
    return float(np.median(np.concatenate(gaps)))


def run(task: dict[str, Any], comm: MPI.Comm) -> dict[str, Any] | None:
    summary = search(parse_config(config_table(task)), task["run_dir"], comm=comm)
    if comm.Get_rank() != 0:
        return None
    recorded = read_completed(task["run_dir"])
    return {"evaluations": summary.evaluations, "wall": summary.wall_seconds,
            "objective_seconds": summary.objective_seconds,
            "first_evaluation_seconds": summary.first_evaluation_seconds,
            "recorded": len(recorded), "best": float(recorded["loss"].min()),
            "gap": between_evaluations(recorded), "ranks": comm.Get_size()}


if __name__ == "__main__":
    serve(run)
