"""Optuna's side, run under mpirun from benchmarks/.venv-optuna:
python optuna_side.py TASKS.json OUT.json

Each task is one Optuna study shared by every rank, as Optuna's docs set up a parallel search
without a database server: a journal file (``JournalFileBackend``) in the task's ``run_dir``,
created by rank 0 and loaded by the others, each rank running ``study.optimize`` with
``evals_per_worker`` trials and its own sampler (``TPESampler`` or ``CmaEsSampler`` with
Optuna's defaults, seeded per seed and rank). Wall time is measured like Atoll's: between
barriers around ``optimize``; objective time is summed in the objective.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import optuna
from mpi4py import MPI
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from side import Spent, serve

from objectives import Options, sleep_objective, space

SAMPLERS = {"tpe": optuna.samplers.TPESampler, "cmaes": optuna.samplers.CmaEsSampler}


def run(task: dict[str, Any], comm: MPI.Comm) -> dict[str, Any]:
    limits = space(task["function"], task.get("dims"))
    ctx = Options(function=task["function"], sleep=task["sleep"])
    spent = Spent()

    def objective(trial: optuna.Trial) -> float:
        params = {name: trial.suggest_float(name, low, high)
                  for name, (low, high) in limits.items()}
        return spent.call(sleep_objective, params, ctx)

    Path(task["run_dir"]).mkdir(parents=True, exist_ok=True)
    storage = JournalStorage(JournalFileBackend(str(Path(task["run_dir"]) / "journal.log")))
    # One stream per seed and rank (a string seed, as on Propulate's side), as 31-bit ints.
    seed = random.Random(f"{task['seed']}:{comm.Get_rank()}").getrandbits(31)
    sampler = SAMPLERS[task["sampler"]](seed=seed)
    if comm.Get_rank() == 0:
        optuna.create_study(study_name="bench", storage=storage)
    comm.Barrier()
    study = optuna.load_study(study_name="bench", storage=storage, sampler=sampler)
    comm.Barrier()
    start = time.time()
    study.optimize(objective, n_trials=task["evals_per_worker"])
    comm.Barrier()
    return spent.result(comm, time.time() - start)


if __name__ == "__main__":
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    serve(run)
