"""Ray Tune as a peer on the training tasks of training_reuse.py (issue #30, item 3).

Ray Tune 2.60 (benchmarks/.venv-ray, ray_training_side.py) trains the same network on the same
data, split and batch size as Atoll's built-in classifier for the same parameters (its side
imports atoll.objectives.classifier, atoll.objectives.data and spirals.py), in the same space
(training_reuse.CONFIG), with two of its schedulers:

- ``ASHA``: random search with its ASHAScheduler (max_t EPOCHS, grace period 2, reduction
  factor 3 on validation accuracy: the rungs of Atoll's ASHA);
- ``PBT``: its PopulationBasedTraining, 4 members (Atoll's PBT population: 2 x its workers),
  a perturbation every READY epochs over ``lr``, ``gamma`` and ``activation`` (``conv_layers``,
  the shape parameter, stays with a member, as in Atoll's PBT), Ray's defaults otherwise
  (quantile 0.25, resample 0.25, factors 0.8 and 1.2: Atoll's too); checkpoints are tensors
  in a ``.npz``, through Ray's Checkpoint API.

Equal resources: each trial is a Ray Train TorchTrainer (its V1 API, which Tune's PBT can
checkpoint) of 2 CPU workers (DDP, gloo), 2 trials at a time, as Atoll's 4 ranks in 2 workers
of 2. Each search stops once BUDGET epochs are reported (one report per epoch trained, counted
in the order reported); Ray's own start-up of trials and workers (a new trainer and process
group for every trial, and for every PBT member each time it is resumed) is part of its wall
time, not of the budget. That start-up makes the Ray searches take hours here: not in ``make
bench``.

Rows (reports, no target), medians over the seeds, per task and scheduler: the epochs until
Atoll's and Ray's reached the full-training GA's median best validation accuracy, and the best
validation accuracy each reached within BUDGET epochs. Atoll's curves and the full GA reference
are training_reuse's searches: the very ones when it ran before in this process (``make
bench-training`` runs both), the same searches run here otherwise.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import training_reuse as reuse
from common import HERE, RAY_PYTHON, Row, ensure_ray_venv, mpi_env
from search_cache import RAY_TRAINING, SearchCache
from training_reuse import BUDGET, Curve, best_within, epochs_to

SEEDS = reuse.SEEDS[:3]
"""Ray's searches take hours, so it runs the first three of training_reuse's seeds, and its rows
judge Atoll's searches of those same seeds."""
PEERS = {"ASHA": "ASHAScheduler", "PBT": "PopulationBasedTraining"}
"""Atoll's method (training_reuse.METHODS) -> the Ray Tune scheduler set against it."""
REFERENCE = "full GA"
CACHE: SearchCache | None = None
"""Where each Ray search's result is kept as soon as it ends (``run.py --cache``; ``make
bench-training`` keeps them in the repository, benchmarks/searches/ray-training.jsonl): the
Ray searches take hours, so a run stopped part-way, on this machine or a fresh clone, goes on
from the last one that ended."""


def atoll_curves(scratch: Path, task: str) -> dict[str, list[Curve]]:
    """The full GA's and each peer method's curves on ``task``, one per seed."""
    config = reuse.write_config(scratch, task)
    curves: dict[str, list[Curve]] = {}
    for method in (REFERENCE, *PEERS):
        for seed in SEEDS:
            key = (task, method, seed)
            if key not in reuse.SEARCHED:
                reuse.SEARCHED[key] = reuse.search(reuse.search_folder(scratch, task, method, seed),
                                                   config, seed, reuse.METHODS[method])
            curves.setdefault(method, []).append(reuse.SEARCHED[key])
    return curves


def ray_tasks(scratch: Path, budget: int = BUDGET, seeds: tuple[int, ...] = SEEDS,
              ready: int = reuse.READY) -> list[dict[str, Any]]:
    """What the Ray side runs: every task, scheduler and seed, with the space, data set, batch
    size and validation fraction of Atoll's configuration (training_reuse.CONFIG)."""
    from atoll.config import load_config
    from atoll.space import CategoricalParam

    tasks = []
    for task in reuse.TASKS:
        config = load_config(reuse.write_config(scratch, task))
        space = {p.name: list(p.choices) if isinstance(p, CategoricalParam) else [p.low, p.high]
                 for p in config.space.params}
        options = {k: config.objective.options[k] for k in ("dataset", "batch_size",
                                                               "val_fraction")}
        tasks += [{"task": task, "scheduler": method, "seed": seed, "budget": budget,
                   "max_t": reuse.EPOCHS, "ready": ready, "space": space, **options}
                  for method in PEERS for seed in seeds]
    return tasks


def ray_curve(reports: list[dict[str, float]], budget: int = BUDGET) -> Curve:
    """The running best validation accuracy over Ray's reports in the order made, cut at
    ``budget`` (a search may report a few epochs more while it stops)."""
    ordered = sorted(reports, key=lambda r: r["time"])[:budget]
    return reuse.running_best([r["val_accuracy"] for r in ordered])


def ray_results(scratch: Path, tasks: list[dict[str, Any]], log: Any = print
                ) -> list[dict[str, Any]]:
    """Each task's result, from CACHE or from a Ray side process of its own (kept in CACHE as
    soon as it ends), in the tasks' order."""
    results = []
    for task in tasks:
        result = CACHE.get(RAY_TRAINING, task) if CACHE else None
        if result is None:
            result = run_ray(scratch, [task])[0]
            if CACHE:
                CACHE.put(RAY_TRAINING, task, result)
        log(f"  Ray Tune, {task['task']}, {task['scheduler']}, seed {task['seed']}: done")
        results.append(result)
    return results


def run_ray(scratch: Path, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every task in one Ray side process; its results, in the tasks' order."""
    (scratch / "ray-tasks.json").write_text(json.dumps(tasks))
    out = scratch / "ray.json"
    done = subprocess.run([str(RAY_PYTHON), str(HERE / "ray_training_side.py"),
                           str(scratch / "ray-tasks.json"), str(out)], env=mpi_env(),
                          capture_output=True, text=True, check=False)
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"ray_training_side.py failed (exit {done.returncode}): "
                           f"{done.stderr[-2000:]}")
    results: list[dict[str, Any]] = json.loads(out.read_text())
    return results


def judge(task: str, atoll: dict[str, list[Curve]], ray: dict[str, list[Curve]]
          ) -> tuple[list[Row], str]:
    """The task's report rows (Atoll against Ray, per scheduler) and their numbers per seed."""
    target = statistics.median(best_within(p, BUDGET) for p in atoll[REFERENCE])
    head = (f"Ray Tune as a peer on {task} (4 ranks: Atoll's workers of 2 ranks, Ray's trials "
            f"of 2 DDP workers, 2 at a time; {len(SEEDS)} seeds, medians; {BUDGET} epochs each)")
    rows = []
    for method, scheduler in PEERS.items():
        mine = statistics.median(epochs_to(p, target) for p in atoll[method])
        theirs = statistics.median(epochs_to(p, target) for p in ray[method])
        rows.append(Row(f"{head}: epochs until {method} reached the full GA's median best "
                        f"validation accuracy {target:.4f}, Atoll's against Ray's {scheduler}",
                        reuse.epochs_text(mine), reuse.epochs_text(theirs), _ratio(mine, theirs),
                        "report"))
        best = [statistics.median(best_within(p, BUDGET) for p in side[method])
                for side in (atoll, ray)]
        rows.append(Row(f"{head}: best validation accuracy within {BUDGET} epochs, {method}, "
                        f"Atoll's against Ray's {scheduler}", f"{best[0]:.4f}", f"{best[1]:.4f}",
                        f"{best[0] - best[1]:+.4f}", "report"))
    seen = "; ".join(f"{side} {m}: " + ", ".join(
        f"{best_within(p, BUDGET):.4f} (target after {reuse.epochs_text(epochs_to(p, target))})"
        for p in curves[m]) for side, curves in (("Atoll", atoll), ("Ray", ray)) for m in PEERS)
    return rows, f"Ray Tune as a peer, {task}: best accuracy per seed: {seen}"


def _ratio(mine: float, theirs: float) -> str:
    return f"{mine / theirs:.2f}" if math.isfinite(mine) and math.isfinite(theirs) else "-"


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    ensure_ray_venv()
    rows: list[Row] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="atoll-bench-training-ray-") as name:
        scratch = Path(name)
        tasks = ray_tasks(scratch)
        results = ray_results(scratch, tasks, log)  # first: kept, where Atoll's are not
        atoll = {task: atoll_curves(scratch, task) for task in reuse.TASKS}
        log("  Atoll's searches: done")
    ray: dict[str, dict[str, list[Curve]]] = {task: {m: [] for m in PEERS} for task in reuse.TASKS}
    for task, result in zip(tasks, results, strict=True):
        if result["errors"]:
            raise RuntimeError(f"Ray Tune, {task['task']}, {task['scheduler']}, seed "
                               f"{task['seed']}: {len(result['errors'])} trials failed, the "
                               f"first: {result['errors'][0]}")
        ray[task["task"]][task["scheduler"]].append(ray_curve(result["reports"]))
        longest = max((len(t["epochs"]) for t in result["trials"]), default=0)
        notes.append(f"Ray Tune, {task['task']}, {task['scheduler']}, seed {task['seed']}: "
                     f"{len(result['trials'])} trials trained (the longest {longest} epochs), "
                     f"{len(result['reports'])} epochs reported in {result['seconds']:.0f} s")
    for task in reuse.TASKS:
        got, note = judge(task, atoll[task], ray[task])
        rows += got
        notes.append(note)
    if CACHE:
        notes.append(f"Ray Tune's training searches: {CACHE.summary()}")
    return rows, notes


if __name__ == "__main__":
    from common import standalone

    standalone(run)
