"""Optuna's side of the multi-fidelity rows, one process from benchmarks/.venv-optuna:
python optuna_fidelity_side.py TASKS.json OUT.json

Each task is one study on the learning-curve task (learning_curves.py) with Optuna's TPE
sampler and a pruner (its SuccessiveHalvingPruner or HyperbandPruner, as its docs set them up
for epochs), run ``jobs`` trials at once the way Optuna's docs run a study in parallel in one
process (``optimize(n_jobs=...)``: threads on one in-memory study, the pruner as usual). With
several jobs each epoch sleeps EPOCH_SECONDS, so that the threads train at the same time (as
real epochs would, outside the interpreter's lock) and a trial is judged against what its
running peers reported so far, as Atoll's workers are. The output lists, per trial in the order
they end: its parameters, whether it trained every epoch, its last reported loss, and the epochs
all trials had reported by then (the ones still running too).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import learning_curves as task
import optuna

EPOCH_SECONDS = 0.02
PRUNERS = {
    "halving": lambda: optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3),
    "hyperband": lambda: optuna.pruners.HyperbandPruner(
        min_resource=1, max_resource=task.MAX_EPOCHS, reduction_factor=3),
}


def study(pruner: str, seed: int, budget: int, jobs: int) -> list[dict[str, Any]]:
    """Trials until ``budget`` epochs are spent."""
    done: list[dict[str, Any]] = []
    lock = threading.Lock()
    spent = [0]

    def epoch(x: tuple[float, ...], at: int) -> float:
        if jobs > 1:
            time.sleep(EPOCH_SECONDS)
        with lock:
            spent[0] += 1
        return task.loss_at(x, at)

    def end(x: tuple[float, ...], complete: bool, value: float) -> None:
        with lock:
            done.append({"x": x, "complete": complete, "value": value, "spent": spent[0]})

    def objective(trial: optuna.Trial) -> float:
        x = tuple(trial.suggest_float(name, 0.0, 1.0) for name in task.NAMES)
        value = float("nan")
        for at in range(task.MAX_EPOCHS):
            value = epoch(x, at)
            trial.report(value, at)
            if trial.should_prune():
                end(x, False, value)
                raise optuna.TrialPruned()
        end(x, True, value)
        return value

    def stop(study: optuna.Study, trial: Any) -> None:
        if spent[0] >= budget:
            study.stop()

    sampler = optuna.samplers.TPESampler(seed=seed)
    optuna.create_study(sampler=sampler, pruner=PRUNERS[pruner]()).optimize(
        objective, callbacks=[stop], n_jobs=jobs)
    return done


if __name__ == "__main__":
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tasks = json.loads(open(sys.argv[1]).read())
    out = [study(t["pruner"], t["seed"], t["budget"], t["jobs"]) for t in tasks]
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)
