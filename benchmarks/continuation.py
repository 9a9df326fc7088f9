"""Training thrown away by a stop: the embedded default search stopped mid-training, resumed.

The default search (the DDP classifier on digits, workers of 2 ranks, RANKS ranks) runs with
``search.wall_time = WALL_TIME`` s, so it stops (exit 75) with evaluations in flight; ``atoll
resume --set search.wall_time=0`` then finishes it. From the record: the epochs trained twice
(an (individual, epoch) recorded more than once: Atoll continues an interrupted evaluation from
its last checkpoint), against the epochs a restart from scratch would have trained again (every
epoch of the interrupted parts: what Propulate and Optuna redo). Target: at most one epoch
redone per interrupted evaluation (the one the stop cut short).
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

from common import ROOT, Row, mpi_env

RANKS = 4
WALL_TIME = 60


def launch(*args: str) -> int:
    command = [str(ROOT / ".venv" / "bin" / "mpirun"), "-n", str(RANKS), "--oversubscribe",
               "--bind-to", "none", str(ROOT / ".venv" / "bin" / "atoll"), *args, "-q"]
    done = subprocess.run(command, capture_output=True, text=True, env=mpi_env(), check=False)
    if done.returncode not in (0, 75):
        raise RuntimeError(f"{' '.join(command)}: {done.stderr[-2000:]}")
    return done.returncode


def thrown_away(run_dir: Path) -> tuple[int, int, int]:
    """(epochs trained twice, epochs of the interrupted parts, interrupted parts)."""
    import numpy as np

    from atoll.individual import Status
    from atoll.record import open_run, read_history

    run = open_run(run_dir)
    pairs = run.epochs["individual"].astype(np.int64) * 100_000 + run.epochs["epoch"]
    twice = len(pairs) - len(np.unique(pairs))
    parts = read_history(run_dir, len(run.jobs))[0]
    cut = parts["id"][parts["status"] == int(Status.INTERRUPTED)]
    job0 = run.epochs[run.epochs["time"] <= run.jobs["stop"][0]]
    in_parts = int(np.isin(job0["individual"], cut).sum())
    return twice, in_parts, len(cut)


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    with tempfile.TemporaryDirectory(prefix="atoll-bench-continue-") as scratch:
        run_dir = Path(scratch) / "run"
        first = launch("search", "--run-dir", str(run_dir), "--set",
                       f"search.wall_time={WALL_TIME}")
        if first != 75:
            raise RuntimeError(f"the first job ended with {first} before its wall time: "
                               "raise nothing, lower WALL_TIME")
        if launch("resume", str(run_dir), "--set", "search.wall_time=0") != 0:
            raise RuntimeError("the resumed job did not finish the search")
        twice, in_parts, cut = thrown_away(run_dir)
    log(f"  {cut} evaluations interrupted: {twice} epochs trained twice, {in_parts} epochs in "
        "their interrupted parts")
    return [Row(f"training thrown away by a wall-time stop: the default digits search ({RANKS} "
                f"ranks, workers of 2) stopped after {WALL_TIME} s and resumed; Atoll: epochs "
                f"trained twice (continued from checkpoints); other: the epochs a restart from "
                f"scratch redoes ({cut} interrupted evaluations)", f"{twice} epochs",
                f"{in_parts} epochs", f"{twice / in_parts:.2f}" if in_parts else "-",
                f"<= {cut} (one per interrupted evaluation)", twice <= cut)], \
        [f"continuation: {cut} interrupted, {twice} epochs redone, {in_parts} from scratch"]
