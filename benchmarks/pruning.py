"""9. Pruning on the default digits search: training epochs saved, accuracy kept.

The embedded default search (the DDP classifier on digits, workers of 2 ranks, 4 ranks: 48
individuals, GENERATIONS per worker), run with and without ``pruning.rule = "median"`` for SEEDS
seeds. Not cut shorter: the rule lets its first ``min_completed`` individuals train whole, so
a shorter search saves a smaller share of its epochs than the searches users run (24
individuals against the whole default: benchmarks/EARLIER-RUNS.md).
Target (issue 19): at least 30% fewer training epochs for the same number of individuals, with
the best validation accuracy no more than 1 point below the search without pruning (medians
over the seeds).
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from common import ROOT, Row, mpi_env

SEEDS = (1, 2, 3)
RANKS = 4
GENERATIONS = 24
MAX_EPOCHS_SHARE = 0.7
MAX_ACCURACY_DROP = 0.01


def search(run_dir: Path, seed: int, pruning: bool) -> tuple[int, float]:
    """Epochs trained and best validation accuracy of one default search."""
    from atoll.individual import Status
    from atoll.record import open_run

    settings = ["--set", f"seed={seed}", "--set", f"search.generations={GENERATIONS}"]
    if pruning:
        settings += ["--set", "pruning.rule=median"]
    command = [str(ROOT / ".venv" / "bin" / "mpirun"), "-n", str(RANKS), "--oversubscribe",
               "--bind-to", "none", str(ROOT / ".venv" / "bin" / "atoll"), "search",
               "--run-dir", str(run_dir), "-q", *settings]
    done = subprocess.run(command, capture_output=True, text=True, env=mpi_env(), check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr[-2000:]}")
    run = open_run(run_dir)
    completed = run.individuals["id"][run.individuals["status"] != int(Status.FAILED)]
    epochs = run.epochs[[i in set(completed.tolist()) for i in run.epochs["individual"]]]
    return len(run.epochs), float(epochs["val_accuracy"].max())


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    results: dict[bool, list[tuple[int, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="atoll-bench-pruning-") as scratch:
        for seed in SEEDS:
            for pruning in (False, True):
                got = search(Path(scratch) / f"s{seed}-{int(pruning)}", seed, pruning)
                results[pruning].append(got)
                log(f"  seed {seed}, pruning {'on' if pruning else 'off'}: {got[0]} epochs, "
                    f"best val accuracy {got[1]:.4f}")
    epochs = {k: statistics.median(e for e, _ in v) for k, v in results.items()}
    accuracy = {k: statistics.median(a for _, a in v) for k, v in results.items()}
    share = epochs[True] / epochs[False]
    drop = accuracy[False] - accuracy[True]
    rows = [Row(f"pruning (median rule) on the default digits search of {GENERATIONS * RANKS // 2} "
                f"individuals, {RANKS} ranks, median of "
                f"{len(SEEDS)} seeds: training epochs with pruning (Atoll) and without (other)",
                f"{epochs[True]:.0f}", f"{epochs[False]:.0f}", f"{share:.2f}",
                f"<= {MAX_EPOCHS_SHARE}", share <= MAX_EPOCHS_SHARE),
            Row("pruning: best validation accuracy with pruning (Atoll) and without (other); "
                "ratio column: the drop in points",
                f"{accuracy[True]:.4f}", f"{accuracy[False]:.4f}", f"{100 * drop:.2f}",
                f"drop <= {100 * MAX_ACCURACY_DROP:.0f} point", drop <= MAX_ACCURACY_DROP)]
    notes = [f"pruning: epochs {epochs}, accuracy {accuracy}"]
    return rows, notes


if __name__ == "__main__":
    for row in run()[0]:
        print(row)
