"""Ray Tune's side of the multi-fidelity rows, one process from benchmarks/.venv-ray:
python ray_fidelity_side.py TASKS.json OUT.json

Each task is one Tuner run on the learning-curve task (learning_curves.py): random search
(Ray's BasicVariantGenerator, seeded) with its ASHAScheduler set up for epochs as its docs do
(grace period 1, reduction factor 3, max_t the task's epochs), WORKERS trials at a time (as
Atoll's workers), until the task's epoch budget is reported. Each report carries its wall
time, so the output lists, per trial: its parameters, the epochs it trained, whether it trained
all of them, its last reported loss, and when it reported it.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import learning_curves as task
from ray import tune
from ray.tune.schedulers import ASHAScheduler
from ray.tune.search.basic_variant import BasicVariantGenerator
from ray_budget import Budget, ray_started

WORKERS = 4


def train(config: dict[str, float]) -> None:
    x = tuple(config[name] for name in task.NAMES)
    for epoch in range(task.MAX_EPOCHS):
        tune.report({"loss": task.loss_at(x, epoch), "epoch": epoch + 1, "t": time.time()})


def search(seed: int, budget: int, storage: str) -> list[dict[str, Any]]:
    scheduler = ASHAScheduler(time_attr="training_iteration", max_t=task.MAX_EPOCHS,
                              grace_period=1, reduction_factor=3)
    tuner = tune.Tuner(
        train, param_space={name: tune.uniform(0.0, 1.0) for name in task.NAMES},
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", scheduler=scheduler, num_samples=budget,
            max_concurrent_trials=WORKERS,
            search_alg=BasicVariantGenerator(random_state=seed)),
        run_config=tune.RunConfig(stop=Budget(budget), storage_path=storage,
                                  name=f"seed{seed}", verbose=0))
    trials = []
    for result in tuner.fit():
        frame = result.metrics_dataframe
        if frame is None or not len(frame):
            continue
        last = frame.iloc[-1]
        trials.append({"x": [float(result.config[name]) for name in task.NAMES],
                       "epochs": int(last["epoch"]), "value": float(last["loss"]),
                       "complete": int(last["epoch"]) == task.MAX_EPOCHS,
                       "times": [float(t) for t in frame["t"]]})
    return trials


if __name__ == "__main__":
    tasks = json.loads(open(sys.argv[1]).read())
    with ray_started(WORKERS, "ray-fidelity-") as storage:
        out = [search(t["seed"], t["budget"], storage) for t in tasks]
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)
