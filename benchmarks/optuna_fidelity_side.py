"""Optuna's side of the multi-fidelity rows, one process from benchmarks/.venv-optuna:
python optuna_fidelity_side.py TASKS.json OUT.json

Each task is one study on the learning-curve task (learning_curves.py) with Optuna's TPE
sampler and a pruner (its SuccessiveHalvingPruner or HyperbandPruner, as its docs set them up
for epochs), run trial after trial. The output lists, per trial in order: its parameters, the
epochs it trained, whether it trained all of them, and its last reported loss.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import learning_curves as task
import optuna

PRUNERS = {
    "halving": lambda: optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3),
    "hyperband": lambda: optuna.pruners.HyperbandPruner(
        min_resource=1, max_resource=task.MAX_EPOCHS, reduction_factor=3),
}


def study(pruner: str, seed: int, budget: int) -> list[dict[str, Any]]:
    """Trials until ``budget`` epochs are spent."""
    done: list[dict[str, Any]] = []

    def objective(trial: optuna.Trial) -> float:
        x = tuple(trial.suggest_float(name, 0.0, 1.0) for name in task.NAMES)
        value = float("nan")
        for epoch in range(task.MAX_EPOCHS):
            value = task.loss_at(x, epoch)
            trial.report(value, epoch)
            if trial.should_prune():
                done.append({"x": x, "epochs": epoch + 1, "complete": False, "value": value})
                raise optuna.TrialPruned()
        done.append({"x": x, "epochs": task.MAX_EPOCHS, "complete": True, "value": value})
        return value

    def spent(study: optuna.Study, trial: Any) -> None:
        if sum(d["epochs"] for d in done) >= budget:
            study.stop()

    sampler = optuna.samplers.TPESampler(seed=seed)
    optuna.create_study(sampler=sampler, pruner=PRUNERS[pruner]()).optimize(
        objective, callbacks=[spent])
    return done


if __name__ == "__main__":
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tasks = json.loads(open(sys.argv[1]).read())
    out = [study(t["pruner"], t["seed"], t["budget"]) for t in tasks]
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)
