"""Ray Tune's side of the training rows (training_ray.py), one process from benchmarks/.venv-ray:
python ray_training_side.py TASKS.json OUT.json

Each task is one Tuner run over a Ray Train TorchTrainer of TRIAL_RANKS CPU workers (DDP,
gloo; the trial itself: ray_training_member.py), WORKERS trials at a time, the space of
training_reuse.CONFIG, with the task's scheduler (ASHAScheduler or PopulationBasedTraining),
until the task's epoch budget is reported in all. The output lists, per task, every epoch's
report (validation accuracy and wall time), how many trials ran and how long the search took.
Ray Train's V1 API (RAY_TRAIN_V2_ENABLED=0): a trainer is then Tune's trial and its
checkpoints are Tune's, which PBT exploits; V2's Tune integration passes a trial's
checkpoints to Tune only as paths in its metrics. A trainer's coordinator reserves no CPU
(``trainer_resources``), so that 2 trials of 2 workers fit on 4 CPUs, as Atoll's 4 ranks do.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "0")
os.environ.setdefault("RAY_TRAIN_ENABLE_V2_MIGRATION_WARNINGS", "0")

from ray import tune  # noqa: E402
from ray.train import CheckpointConfig, RunConfig, ScalingConfig  # noqa: E402
from ray.train.torch import TorchConfig, TorchTrainer  # noqa: E402
from ray.tune.schedulers import ASHAScheduler, PopulationBasedTraining  # noqa: E402
from ray.tune.search.basic_variant import BasicVariantGenerator  # noqa: E402
from ray_budget import Budget, ray_started  # noqa: E402
from ray_training_member import member  # noqa: E402

WORKERS = 2
TRIAL_RANKS = 2
POPULATION = 4
EXPLORED = ("lr", "gamma", "activation")
"""What PBT explores: the parameters that keep the model's shapes, as Atoll's PBT does."""


def domains(space: dict[str, list[Any]]) -> dict[str, Any]:
    """Atoll's space in Tune's terms: conv_layers an int, activation a choice, lr log-uniform,
    gamma uniform (training_reuse.CONFIG)."""
    (low, high), choices = space["conv_layers"], space["activation"]
    return {"conv_layers": tune.randint(low, high + 1), "activation": tune.choice(choices),
            "lr": tune.loguniform(*space["lr"]), "gamma": tune.uniform(*space["gamma"])}


def clipped(config: dict[str, Any], space: dict[str, list[Any]]) -> dict[str, Any]:
    """PBT's explore kept in the space, as Atoll's is (a perturbed gamma above 1 would make
    the learning rate grow)."""
    inner = dict(config["train_loop_config"])
    for name in ("lr", "gamma"):
        inner[name] = min(max(inner[name], space[name][0]), space[name][1])
    return {**config, "train_loop_config": inner}


def scheduler_of(task: dict[str, Any]) -> tuple[Any, int, int]:
    """(Tune scheduler, trials to sample, epochs a trial may train) for the task."""
    if task["scheduler"] == "ASHA":
        return (ASHAScheduler(time_attr="training_iteration", max_t=task["max_t"],
                              grace_period=2, reduction_factor=3),
                task["budget"], task["max_t"])
    space = task["space"]
    mutations = {k: v for k, v in domains(space).items() if k in EXPLORED}
    mutations["activation"] = list(space["activation"])  # neighbours, as Atoll's explore
    return (PopulationBasedTraining(time_attr="training_iteration",
                                    perturbation_interval=task["ready"],
                                    hyperparam_mutations={"train_loop_config": mutations},
                                    custom_explore_fn=lambda c: clipped(c, space)),
            POPULATION, task["budget"])


def search(task: dict[str, Any], storage: str) -> dict[str, Any]:
    """One Tuner run of the task (its scheduler, seed and budget); what it reported."""
    random.seed(task["seed"])  # PBT's explore draws from Python's generator
    scheduler, samples, epochs = scheduler_of(task)
    space = {"dataset": task["dataset"], "batch_size": task["batch_size"],
             "val_fraction": task["val_fraction"], "epochs": epochs,
             "checkpoints": task["scheduler"] == "PBT", **domains(task["space"]),
             "seed": tune.randint(0, 2**31 - 1)}
    trainer = TorchTrainer(member, torch_config=TorchConfig(backend="gloo"),
                           scaling_config=ScalingConfig(num_workers=TRIAL_RANKS, use_gpu=False,
                                                        trainer_resources={"CPU": 0}))
    name = f"{task['task']}-{task['scheduler']}-{task['seed']}"
    # Every checkpoint is kept (tens of kilobytes each): a member that PBT paused may exploit
    # another's checkpoint many epochs later, and Ray fails a trial whose source is gone.
    tuner = tune.Tuner(
        trainer, param_space={"train_loop_config": space},
        tune_config=tune.TuneConfig(
            metric="val_accuracy", mode="max", scheduler=scheduler, num_samples=samples,
            max_concurrent_trials=WORKERS,
            search_alg=BasicVariantGenerator(random_state=task["seed"])),
        run_config=RunConfig(stop=Budget(task["budget"]), storage_path=storage, name=name,
                             verbose=0, checkpoint_config=CheckpointConfig(num_to_keep=None)))
    started = time.time()
    results = tuner.fit()
    return {**reported(results), "seconds": time.time() - started}


def reported(results: tune.ResultGrid) -> dict[str, Any]:
    """Every epoch's report (accuracy, wall time), per trial that trained, the epochs it
    reported (numbered on from any checkpoint it started from) and its ranks, and the last line
    of each failed trial's error (the exception's message)."""
    reports, trials = [], []
    errors = [(str(r.error).strip().splitlines() or ["?"])[-1] for r in results if r.error]
    for result in results:
        frame = result.metrics_dataframe
        if frame is None or not len(frame):
            continue
        reports += [{"time": float(t), "val_accuracy": float(a)}
                    for t, a in zip(frame["time"], frame["val_accuracy"], strict=True)]
        trials.append({"epochs": [int(e) for e in frame["epoch"]],
                       "ranks": sorted({int(r) for r in frame["ranks"]})})
    return {"reports": reports, "trials": trials, "errors": errors}


if __name__ == "__main__":
    tasks = json.loads(Path(sys.argv[1]).read_text())
    with ray_started(WORKERS * TRIAL_RANKS, "ray-training-") as storage:
        out = [search(t, storage) for t in tasks]
    Path(sys.argv[2]).write_text(json.dumps(out))
