"""Regret against training epochs spent, on a synthetic learning-curve task (issue #30, item 2).

Atoll's schedulers (full training, the median rule, ASHA: successive halving's promotion form)
run the learning-curve task of learning_curves.py under mpirun with RANKS workers; Optuna's TPE
runs it with its SuccessiveHalvingPruner and HyperbandPruner, RANKS trials at once
(benchmarks/.venv-optuna, optuna_fidelity_side.py), and, as an unjudged extra, one trial at a
time. Every method gets EPOCH_BUDGET epochs, SEEDS seeds. With BENCH_FIDELITY_ALL=1 the row
also runs the methods that repeat what these show (full training with CMA-ES, the stopping form
of successive halving, ASHA with the GA). Ray Tune's side is benchmarks/fidelity_ray.py (``make
bench-training``): Ray starts an actor per trial, which makes it too slow for ``make bench``.

A method's trajectory is the regret of its incumbent (the completed candidate with the least
reported final loss; regret of its noiseless fully trained loss) after each evaluation ends, in
the order they end, against the epochs spent by then (by every evaluation, the running ones
too). For regret levels between what Optuna's best parallel pruner reaches at a tenth of the
budget and at the end, the row compares the median (over seeds) epochs each side needs to
reach the level. Target: Atoll's best scheduler needs at most half the epochs of Optuna's best
pruner at every level.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import learning_curves as task
import numpy as np
from common import HERE, OPTUNA_PYTHON, ROOT, Row, ensure_optuna_venv, mpi_env

SEEDS = tuple(range(1, 21))
"""Five flipped the verdict between two runs of the same code (worst ratio 0.87, then 1.50 at
the last level; final regrets 0.0037 against 0.0055, then 0.0034 against 0.0030: 2026-11-28)."""
RANKS = 4
EPOCH_BUDGET = 40 * task.MAX_EPOCHS
LEVELS = 8
TARGET = 0.5
METHODS: dict[str, list[str]] = {
    "full training, GA": ["search.evaluations=44"],
    "median rule, GA": ["search.evaluations=200", "pruning.rule=median"],
    "ASHA, CMA-ES": ["search.evaluations=60", "pruning.rule=asha", "evolution.strategy=cmaes"],
}
"""``make bench``'s methods; each budget of evaluations spends a little over EPOCH_BUDGET
epochs (a paused evaluation spends none until it finishes)."""
REPEATS: dict[str, list[str]] = {
    "full training, CMA-ES": ["search.evaluations=44", "evolution.strategy=cmaes"],
    "successive halving, GA": ["search.evaluations=500", "pruning.rule=halving"],
    "successive halving, CMA-ES": ["search.evaluations=500", "pruning.rule=halving",
                                   "evolution.strategy=cmaes"],
    "ASHA, GA": ["search.evaluations=60", "pruning.rule=asha"],
}
"""Methods that repeat what METHODS show, run with BENCH_FIDELITY_ALL=1."""
ALL = {**METHODS, **REPEATS}
CONFIG = f"""
[objective]
name = "learning_curves:train"
[evolution]
population_size = 8
[pruning]
metric = "val_loss"
min_epochs = 1
max_epochs = {task.MAX_EPOCHS}
eta = 3
warmup_epochs = 1
min_completed = 5
{"".join(f'''
[space.{name}]
type = "float"
low = 0.0
high = 1.0''' for name in task.NAMES)}
"""

Trajectory = list[tuple[int, float]]  # (epochs spent, regret of the incumbent) after each end
End = tuple[int, tuple[float, ...], bool, float]
"""(epochs spent by then, x, whether it trained every epoch, its last reported loss)."""


def trajectory(ends: list[End]) -> Trajectory:
    """The incumbent's regret after each evaluation ended, in the order they ended."""
    best, regret, out = math.inf, math.inf, []
    for spent, x, complete, value in ends:
        if complete and value < best:
            best, regret = value, task.fully_trained(x) - task.BEST
        out.append((spent, regret))
        if spent >= EPOCH_BUDGET:
            break
    return out


def epochs_to(path: Trajectory, level: float) -> float:
    return next((float(spent) for spent, regret in path if regret <= level), math.inf)


def atoll_run(run_dir: Path, config: Path, seed: int, rule: str,
              settings: list[str]) -> Trajectory:
    from atoll.individual import Status
    from atoll.record import open_run

    command = [str(ROOT / ".venv" / "bin" / "mpirun"), "-n", str(RANKS), "--oversubscribe",
               "--bind-to", "none", str(ROOT / ".venv" / "bin" / "atoll"), "search", "-q",
               "--config", str(config), "--run-dir", str(run_dir), "--set", f"seed={seed}",
               *(part for s in settings for part in ("--set", s))]
    done = subprocess.run(command, capture_output=True, text=True, env=mpi_env(), check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr[-2000:]}")
    run = open_run(run_dir)
    ind = run.individuals[run.individuals["status"] != int(Status.INTERRUPTED)]
    ind = ind[ind["finished"].argsort()]
    epoch_times = np.sort(run.epochs["time"])
    if len(epoch_times) < EPOCH_BUDGET:
        raise RuntimeError(f"{rule}: {len(epoch_times)} epochs, short of {EPOCH_BUDGET}: "
                           "raise its search.evaluations")
    spent = np.searchsorted(epoch_times, ind["finished"], side="right")  # epochs of every part
    return trajectory([(int(n), tuple(float(row[name]) for name in task.NAMES),
                        int(row["status"]) == int(Status.OK), float(row["loss"]))
                       for n, row in zip(spent, ind, strict=True)])


def optuna_runs(scratch: Path, pruner: str, jobs: int) -> list[Trajectory]:
    tasks = [{"pruner": pruner, "seed": seed, "budget": EPOCH_BUDGET, "jobs": jobs}
             for seed in SEEDS]
    (scratch / "tasks.json").write_text(json.dumps(tasks))
    out = scratch / f"optuna-{pruner}-{jobs}.json"
    subprocess.run([str(OPTUNA_PYTHON), str(HERE / "optuna_fidelity_side.py"),
                    str(scratch / "tasks.json"), str(out)], check=True, env=mpi_env())
    return [trajectory([(e["spent"], tuple(e["x"]), e["complete"], e["value"]) for e in study])
            for study in json.loads(out.read_text())]


def first_completion(path: Trajectory) -> float:
    """The epochs spent when the first evaluation that trained every epoch ended: no level is
    reached before. A search running RANKS at once has then spent about RANKS x MAX_EPOCHS
    (one at a time: MAX_EPOCHS), whatever its scheduler."""
    return next((float(spent) for spent, regret in path if math.isfinite(regret)), math.inf)


def levels(paths: list[Trajectory]) -> list[float]:
    """Regret levels from the median at a tenth of the budget to the median at its end."""
    high = statistics.median(min((r for s, r in p if s <= EPOCH_BUDGET // 10), default=math.inf)
                             for p in paths)
    low = statistics.median(p[-1][1] if p else math.inf for p in paths)
    if not (math.isfinite(high) and math.isfinite(low) and low > 0):
        return [high] if math.isfinite(high) else []
    return [high * (low / high) ** (k / (LEVELS - 1)) for k in range(LEVELS - 1)] + [low]


def epochs_at(paths: list[Trajectory], at: list[float]) -> list[float]:
    """The median epochs to reach each level (inf where most seeds never do)."""
    return [statistics.median(epochs_to(p, level) for p in paths) for level in at]


def worst_ratio(ours: list[Trajectory], theirs: list[Trajectory], at: list[float]) -> float:
    ratios = [mine / other for mine, other in zip(epochs_at(ours, at), epochs_at(theirs, at),
                                                  strict=True) if math.isfinite(other)]
    return max(ratios, default=math.nan)


def best_scheduler(ratios: dict[str, float], finals: dict[str, float]) -> str:
    """The method with the lowest worst ratio (NaN: no level to judge, as never), and among
    those that never reach some level (inf), the one with the lowest final regret: the row
    names it as Atoll's best."""
    return min(ratios, key=lambda n: (ratios[n] if ratios[n] == ratios[n] else math.inf,
                                      finals[n]))


def searches(scratch: Path, log: Any) -> dict[str, list[Trajectory]]:
    """Every method's trajectories, Atoll's then Optuna's (parallel, then one at a time)."""
    config = scratch / "curves.toml"
    config.write_text(CONFIG)
    methods = dict(METHODS, **(REPEATS if os.environ.get("BENCH_FIDELITY_ALL") == "1" else {}))
    results: dict[str, list[Trajectory]] = {}
    for rule, settings in methods.items():
        results[f"Atoll, {rule}"] = [atoll_run(scratch / f"{rule}-{seed}".replace(" ", "_"),
                                               config, seed, rule, settings) for seed in SEEDS]
        log(f"  Atoll, {rule}: done")
    for jobs, label in ((RANKS, ""), (1, ", one trial at a time")):
        for pruner in ("halving", "hyperband"):
            results[f"Optuna TPE, {pruner}{label}"] = optuna_runs(scratch, pruner, jobs)
            log(f"  Optuna TPE, {pruner}{label}: done")
    return results


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    ensure_optuna_venv()
    with tempfile.TemporaryDirectory(prefix="atoll-bench-fidelity-") as name:
        results = searches(Path(name), log)
    finals = {name: statistics.median(p[-1][1] if p else math.inf for p in paths)
              for name, paths in results.items()}
    judged = [n for n in finals if n.startswith("Optuna") and not n.endswith("at a time")]
    optuna_best = min(judged, key=finals.__getitem__)
    at = levels(results[optuna_best])
    ratios = {n: worst_ratio(results[n], results[optuna_best], at)
              for n in results if n.startswith("Atoll")}
    atoll_best = best_scheduler(ratios, finals)
    shown = "; ".join(f"{n}: {finals[n]:.3g}" for n in results)
    table = "; ".join(f"{n}: " + ", ".join(f"{e:.0f}" for e in epochs_at(results[n], at))
                      for n in results)
    firsts = "; ".join(f"{n}: {statistics.median(first_completion(p) for p in paths):.0f}"
                       for n, paths in results.items())
    notes = [f"multi-fidelity, median final regret at {EPOCH_BUDGET} epochs: {shown}",
             "multi-fidelity, worst epochs ratio to " + optuna_best + ": "
             + "; ".join(f"{n}: {r:.2f}" for n, r in ratios.items()),
             "multi-fidelity, median epochs to reach regret "
             + ", ".join(f"{level:.3g}" for level in at) + f": {table}",
             "multi-fidelity, median epochs spent when the first evaluation trained every epoch "
             f"(no level is reached before; {RANKS} at once spend about {RANKS} x "
             f"{task.MAX_EPOCHS} = {RANKS * task.MAX_EPOCHS} by then, whatever the scheduler, "
             f"so no search running {RANKS} at once reaches a level in half the epochs of a "
             f"reference that reaches it before {2 * RANKS * task.MAX_EPOCHS}): {firsts}"]
    for note in notes:
        log("  " + note)
    best_ratio = ratios[atoll_best]
    rows = [Row(f"multi-fidelity learning curves (4-d, {task.MAX_EPOCHS} epochs, {EPOCH_BUDGET} "
                f"epochs per search, {len(SEEDS)} seeds, {RANKS} evaluations at once on both "
                f"sides): epochs to reach each of {len(at)} regret levels, medians; Atoll's "
                f"best ({atoll_best}) against Optuna's best ({optuna_best}); ratio: the worst "
                "level", f"final regret {finals[atoll_best]:.3g}",
                f"final regret {finals[optuna_best]:.3g}", f"{best_ratio:.2f}",
                f"<= {TARGET:g} at every level", best_ratio <= TARGET)]
    return rows, notes
