"""The Python API: run a search from your own script (under ``mpirun`` or alone).

    import atoll
    config = atoll.load_config("examples/sphere.toml", ["search.generations=20"])
    summary = atoll.search(config, "runs/sphere")   # collective over MPI.COMM_WORLD
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from atoll.config import Config, load_config

if TYPE_CHECKING:
    from mpi4py import MPI

    from atoll.job.runner import JobSummary

__all__ = ["load_config", "search"]


def search(config: Config, run_dir: str | os.PathLike[str], *,
           comm: MPI.Comm | None = None) -> JobSummary:
    """Run a new search in ``run_dir``; every rank of ``comm`` (default: world) must call it."""
    from mpi4py import MPI

    from atoll.job.runner import run_search

    return run_search(config, Path(run_dir), comm if comm is not None else MPI.COMM_WORLD)
