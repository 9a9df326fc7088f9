"""The Python API: run a search from your own script (under ``mpirun`` or alone), and take
the best model in one step.

    import atoll
    config = atoll.load_config("examples/sphere.toml", ["search.generations=20"])
    summary = atoll.search(config, "runs/sphere")   # collective over MPI.COMM_WORLD
    best = atoll.best("runs/sphere")                # id, value, params, metrics, weights file
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atoll.config import Config, load_config

if TYPE_CHECKING:
    from mpi4py import MPI

    from atoll.job.runner import JobSummary

__all__ = ["Best", "best", "load_config", "search"]


@dataclass(frozen=True)
class Best:
    """A run's best individual: what it was, how it did, and where its weights are."""

    id: int
    loss: float
    """What the search minimized: the objective's value, negated for ``direction = "maximize"``."""
    value: float
    """The objective's own value (the loss itself when minimizing)."""
    params: dict[str, Any]
    metrics: dict[str, float]
    """The epoch metrics it reported at its best epoch (empty if it reported none)."""
    weights: Path | None
    """Its kept weights, None if not kept: a file (``atoll.record.models.load_state_dict``), or
    for a command objective its script's checkpoint directory as it was when it finished."""


def search(config: Config, run_dir: str | os.PathLike[str], *,
           comm: MPI.Comm | None = None) -> JobSummary:
    """Run a new search in ``run_dir``; every rank of ``comm`` (default: world) must call it."""
    from mpi4py import MPI

    from atoll.job.runner import run_search
    from atoll.logs import job_messages_on_rank_0

    comm = comm if comm is not None else MPI.COMM_WORLD
    with job_messages_on_rank_0(comm.Get_rank()):
        return run_search(config, Path(run_dir), comm)


def best(run_dir: str | os.PathLike[str]) -> Best:
    """The best individual of the run in ``run_dir`` (reads files only: no MPI, no torch)."""
    from atoll.errors import RecordError
    from atoll.record import RunPaths, open_run, plain
    from atoll.views.facts import best_epochs, metric_names, ranked, values

    run = open_run(Path(run_dir))
    found = ranked(run, 1)
    if not len(found):
        raise RecordError(f"{run_dir}: no individual finished with a finite loss yet")
    row = found[0]
    ident = int(row["id"])
    epoch = best_epochs(run, [ident]).get(ident)
    metrics = {} if epoch is None else {m: float(epoch[m]) for m in metric_names(run.epochs)}
    weights = RunPaths(run_dir).model_files().get(ident)
    return Best(id=ident, loss=float(row["loss"]), value=float(values(run, row["loss"])),
                params={name: plain(row[name]) for name in run.space.names},
                metrics=metrics, weights=weights)

