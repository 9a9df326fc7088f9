"""Ray Tune as a peer on the learning-curve task of fidelity.py (issue #30, item 3).

Ray Tune 2.60 (benchmarks/.venv-ray, ray_fidelity_side.py): random search with its
ASHAScheduler, RAY_WORKERS trials at a time, against Atoll's ASHA with the GA (fidelity.py's
best scheduler) on RANKS workers, the same epoch budget and seeds. A report row: the epochs
Atoll needs to reach each of Ray's regret levels, as a multiple of Ray's (medians over seeds).
Not in ``make bench``: Ray starts an actor per trial, and a search of fidelity.py's budget
takes minutes; ``make bench-training`` runs it.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import fidelity
import learning_curves as task
import numpy as np
from common import HERE, RAY_PYTHON, Row, ensure_ray_venv, mpi_env
from fidelity import EPOCH_BUDGET, RANKS, Trajectory

ATOLL = "ASHA, GA"
RAY_WORKERS = 4
SEEDS = (1, 2, 3, 4, 5)
"""Fewer than the row of make bench (fidelity.SEEDS): Ray starts an actor per trial."""


def ray_runs(scratch: Path) -> list[Trajectory]:
    """Each Ray trial ends at its last report; the epochs spent by then are the reports of
    every trial made until then (Ray stops a trial between two reports)."""
    tasks = [{"seed": seed, "budget": EPOCH_BUDGET} for seed in SEEDS]
    (scratch / "ray-tasks.json").write_text(json.dumps(tasks))
    out = scratch / "ray.json"
    subprocess.run([str(RAY_PYTHON), str(HERE / "ray_fidelity_side.py"),
                    str(scratch / "ray-tasks.json"), str(out)], check=True, env=mpi_env(),
                   capture_output=True)
    paths = []
    for trials in json.loads(out.read_text()):
        reports = np.sort([t for trial in trials for t in trial["times"]])
        trials.sort(key=lambda trial: trial["times"][-1])
        paths.append(fidelity.trajectory([
            (int(np.searchsorted(reports, trial["times"][-1], side="right")), tuple(trial["x"]),
             trial["complete"], trial["value"]) for trial in trials]))
    return paths


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    ensure_ray_venv()
    with tempfile.TemporaryDirectory(prefix="atoll-bench-fidelity-ray-") as name:
        scratch = Path(name)
        config = scratch / "curves.toml"
        config.write_text(fidelity.CONFIG)
        atoll = [fidelity.atoll_run(scratch / f"atoll-{seed}", config, seed, ATOLL,
                                    fidelity.ALL[ATOLL]) for seed in SEEDS]
        log(f"  Atoll, {ATOLL}: done")
        ray = ray_runs(scratch)
        log("  Ray Tune, ASHA: done")
    finals = [statistics.median(p[-1][1] for p in paths) for paths in (atoll, ray)]
    ratio = fidelity.worst_ratio(atoll, ray, fidelity.levels(ray))
    note = (f"multi-fidelity against Ray Tune: median final regret Atoll ({ATOLL}) "
            f"{finals[0]:.3g}, Ray's ASHA {finals[1]:.3g}; worst epochs ratio {ratio:.2f}")
    log("  " + note)
    return [Row(f"multi-fidelity learning curves (4-d, {task.MAX_EPOCHS} epochs, {EPOCH_BUDGET} "
                f"epochs per search, {len(SEEDS)} seeds): Atoll's {ATOLL} on {RANKS} workers "
                f"against Ray Tune's ASHAScheduler with random search, {RAY_WORKERS} trials at a "
                "time; epochs to reach each of Ray's regret levels, medians; ratio: the worst "
                "level", f"final regret {finals[0]:.3g}", f"final regret {finals[1]:.3g}",
                f"{ratio:.2f}", "report")], [note]
