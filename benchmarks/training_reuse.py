"""Reusing training (issue #30, item 1): ASHA, inherited weights and PBT against full training.

Two tasks, the built-in DDP classifier on each, workers of 2 ranks (gloo, CPU), RANKS ranks,
one island, SEEDS seeds:

- ``spirals`` (benchmarks/spirals.py): ten interleaved spiral arms seen through a random linear
  picture. It stands for real training: validation accuracy still rises after 30 epochs, with
  a widening gap to the training accuracy, so more training keeps paying, as on a large data
  set; it is built in memory from a fixed seed (no download).
- ``digits``: the default search's data, which saturates within a few epochs.

Every method gets the same budget of training epochs, EVALUATIONS x EPOCHS: the full-training GA
(``evolution.strategy = "ga"``, EVALUATIONS evaluations of EPOCHS epochs), the GA whose children
start from their better parent's checkpoint (``inherit.enabled``; only a parent with the
child's ``conv_layers`` passes its weights on) and train INHERITED_EPOCHS on from there
(``inherited_epochs``, a third of EPOCHS: 10 did better on spirals than 5 or all 30,
benchmarks/EARLIER-RUNS.md), INHERIT_EVALUATIONS evaluations, judged on the first BUDGET epochs
they trained; PBT (``evolution.strategy = "pbt"``, segments of READY epochs) and ASHA with
promotion (``pruning.rule = "asha"`` with the GA, ASHA_EVALUATIONS completed evaluations: what
it trains is up to it). Epochs are counted from the record (each epoch row is an epoch
trained), in the order they were trained.

Targets, medians over the seeds: ASHA reaches the full-training GA's median best validation
accuracy within a third of the full GA's epochs; the GA with inherited weights or PBT (the
issue's "or": one verdict, both numbers shown) reaches a higher best validation accuracy than
the full-training GA within the same epochs.
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from common import HERE, ROOT, Row, mpi_env

SEEDS = (1, 2, 3, 4, 5)
"""Three could not tell the methods apart on spirals (their spread between seeds is wider than
the differences between them: benchmarks/EARLIER-RUNS.md)."""
RANKS = 4
EPOCHS = 30
EVALUATIONS = 8
BUDGET = EVALUATIONS * EPOCHS
READY = 5
INHERITED_EPOCHS = EPOCHS // 3
INHERIT_EVALUATIONS = 16  # enough to train more than BUDGET epochs
ASHA_EVALUATIONS = 3
ASHA_SHARE = 1 / 3
TASKS = {"spirals": ("spirals:train", "spirals"),
         "digits": ("atoll.objectives.classifier:train", "digits")}
METHODS: dict[str, list[str]] = {
    "full GA": [f"search.evaluations={EVALUATIONS}"],
    "ASHA": [f"search.evaluations={ASHA_EVALUATIONS}", "pruning.rule=asha"],
    "GA, inherited weights": [f"search.evaluations={INHERIT_EVALUATIONS}", "inherit.enabled=true",
                              f"objective.options.inherited_epochs={INHERITED_EPOCHS}"],
    "PBT": [f"search.evaluations={BUDGET // READY}", "evolution.strategy=pbt",
            f"objective.options.epochs={READY}"],
}
CONFIG = """
[objective]
name = "{objective}"

[objective.options]
dataset = "{dataset}"
epochs = {epochs}
batch_size = 64
patience = {epochs}
val_fraction = 0.2

[space.conv_layers]
type = "int"
low = 1
high = 3

[space.activation]
type = "categorical"
choices = ["relu", "tanh"]

[space.lr]
type = "float"
low = 0.1
high = 3.0
log = true

[space.gamma]
type = "float"
low = 0.95
high = 1.0

[search]
ranks_per_worker = 2
islands = 1

[evolution]
strategy = "ga"

[inherit]
shape_params = ["conv_layers"]

[pruning]
metric = "val_accuracy"
direction = "maximize"
eta = 3
min_epochs = 2
max_epochs = {epochs}
"""

Curve = np.ndarray  # the best validation accuracy so far after each epoch trained
SEARCHED: dict[tuple[str, str, int], Curve] = {}
"""Every curve this process measured, by (task, method, seed): training_ray.py, run after this
module in the same process (make bench-training), compares Ray Tune with these very searches."""


def write_config(folder: Path, task: str, epochs: int = EPOCHS) -> Path:
    objective, dataset = TASKS[task]
    path = folder / f"{task}.toml"
    path.write_text(CONFIG.format(objective=objective, dataset=dataset, epochs=epochs))
    return path


def search(run_dir: Path, config: Path, seed: int, settings: list[str],
           ranks: int = RANKS) -> Curve:
    """One search under mpirun; its curve from the record."""
    command = [str(ROOT / ".venv" / "bin" / "mpirun"), "-n", str(ranks), "--oversubscribe",
               "--bind-to", "none", str(ROOT / ".venv" / "bin" / "atoll"), "search", "-q",
               "--config", str(config), "--run-dir", str(run_dir), "--set", f"seed={seed}",
               *(part for s in settings for part in ("--set", s))]
    # The tree's own app first: a worktree measures its code, not the venv's editable install.
    env = mpi_env({"PYTHONPATH": os.pathsep.join((str(HERE), str(ROOT / "app")))})
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr[-2000:]}")
    return curve(run_dir)


def still_rising(run_dir: Path, at: tuple[int, ...] = (10, 20, EPOCHS)) -> list[float]:
    """The validation accuracy of the run's best fully trained individual after ``at`` epochs."""
    from atoll.record import open_run

    epochs = open_run(run_dir).epochs
    full = [i for i in np.unique(epochs["individual"])
            if (epochs["individual"] == i).sum() >= max(at)]
    if not full:
        return []
    rows = {int(i): epochs[epochs["individual"] == i] for i in full}
    best = max(rows, key=lambda i: float(rows[i]["val_accuracy"][-1]))
    ordered = np.sort(rows[best], order="epoch")
    return [float(ordered["val_accuracy"][n - 1]) for n in at]


def curve(run_dir: Path) -> Curve:
    """The running best validation accuracy over the run's epoch rows in the order trained."""
    from atoll.record import open_run

    epochs = open_run(run_dir).epochs
    return running_best(epochs["val_accuracy"][np.argsort(epochs["time"], kind="stable")])


def running_best(accuracy: Any) -> Curve:
    """The best validation accuracy so far after each epoch, in the order given (an epoch
    without one counts as 0): every side's curve, Atoll's and its peers'."""
    return np.maximum.accumulate(np.nan_to_num(np.asarray(accuracy, dtype=float), nan=0.0))


def search_folder(scratch: Path, task: str, method: str, seed: int) -> Path:
    """Where one of Atoll's searches of these rows keeps its record."""
    return scratch / f"{task}-{method}-{seed}".replace(" ", "_").replace(",", "")


def best_within(path: Curve, epochs: int) -> float:
    return float(path[:epochs].max()) if len(path) else 0.0


def epochs_to(path: Curve, level: float) -> float:
    """Epochs trained until the best accuracy first reached ``level`` (inf: never)."""
    reached = np.flatnonzero(path >= level)
    return float(reached[0] + 1) if len(reached) else math.inf


def judge(task: str, curves: dict[str, list[Curve]]) -> tuple[list[Row], str]:
    """The task's two verdict rows and a note with every number behind them."""
    full = curves["full GA"]
    spent = statistics.median(len(p) for p in full)
    target = statistics.median(best_within(p, BUDGET) for p in full)
    asha = statistics.median(epochs_to(p, target) for p in curves["ASHA"])
    ga_needed = statistics.median(epochs_to(p, target) for p in full)
    best = {m: statistics.median(best_within(p, BUDGET) for p in ps) for m, ps in curves.items()}
    head = (f"training reuse on {task} ({RANKS} ranks, workers of 2, {len(SEEDS)} seeds, "
            f"medians; {BUDGET} epochs each")
    rows = [Row(f"{head}): epochs until ASHA (Atoll) and the full-training GA (other) reached the "
                f"full GA's median best validation accuracy {target:.4f}; ratio: ASHA's epochs "
                f"over the full GA's {spent:.0f}", epochs_text(asha), epochs_text(ga_needed),
                f"{asha / spent:.2f}", f"<= {ASHA_SHARE:.2f}", asha <= ASHA_SHARE * spent)]
    reusing = ("GA, inherited weights", "PBT")
    full_best = best["full GA"]
    rows.append(Row(f"{head}): best validation accuracy within {BUDGET} epochs, GA with "
                    "inherited weights / PBT (Atoll) against the full-training GA (other)",
                    " / ".join(f"{best[m]:.4f}" for m in reusing), f"{full_best:.4f}",
                    " / ".join(f"{best[m] - full_best:+.4f}" for m in reusing),
                    "either higher", any(best[m] > full_best for m in reusing)))
    seen = "; ".join(f"{m}: " + ", ".join(f"{best_within(p, BUDGET):.4f} in {len(p)} epochs"
                                            for p in ps) for m, ps in curves.items())
    return rows, f"training reuse, {task}: best accuracy and epochs trained per seed: {seen}"


def epochs_text(value: float) -> str:
    return f"{value:.0f} epochs" if math.isfinite(value) else "never"


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="atoll-bench-reuse-") as name:
        scratch = Path(name)
        for task in TASKS:
            config = write_config(scratch, task)
            curves: dict[str, list[Curve]] = {m: [] for m in METHODS}
            rising: list[list[float]] = []
            for seed in SEEDS:
                for method, settings in METHODS.items():
                    folder = search_folder(scratch, task, method, seed)
                    path = search(folder, config, seed, settings)
                    SEARCHED[(task, method, seed)] = path
                    curves[method].append(path)
                    if method == "full GA":
                        rising.append(still_rising(folder))
                    log(f"  {task}, {method}, seed {seed}: best validation accuracy "
                        f"{best_within(path, BUDGET):.4f} within {BUDGET} epochs, "
                        f"{len(path)} epochs trained")
            got, note = judge(task, curves)
            rows += got
            notes += [note, f"training reuse, {task}: validation accuracy of each full GA "
                      f"search's best individual after 10, 20 and {EPOCHS} epochs: "
                      + "; ".join("/".join(f"{a:.4f}" for a in r) for r in rising)]
    notes.append(f"training reuse: {RANKS} ranks on this machine's cores; full GA "
                 f"{EVALUATIONS} evaluations of {EPOCHS} epochs, GA with inherited weights "
                 f"{INHERIT_EVALUATIONS} evaluations ({EPOCHS} epochs from scratch, "
                 f"{INHERITED_EPOCHS} on from a parent; its first {BUDGET} epochs judged), PBT "
                 f"{BUDGET // READY} segments of {READY}, ASHA {ASHA_EVALUATIONS} completed "
                 f"evaluations (eta 3, rungs from 2 epochs, {EPOCHS} at most) on validation "
                 "accuracy; no early stopping")
    return rows, notes


if __name__ == "__main__":
    from common import standalone

    standalone(run)
