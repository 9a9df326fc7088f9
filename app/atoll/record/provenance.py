"""Where a job came from: the software it ran with and its SLURM allocation, for the jobs table."""

from __future__ import annotations

import os
import sys
from importlib import metadata

import h5py
import numpy as np

import atoll


def software_versions(mpi_library: str = "") -> dict[str, str]:
    """Versions worth recording; never imports torch or mpi4py to learn them. The MPI
    library's is taken from ``mpi_library``, else from mpi4py if the job loaded it."""
    versions = {"atoll": atoll.__version__, "python": sys.version.split()[0],
                "numpy": np.__version__, "h5py": h5py.version.version,
                "hdf5": h5py.version.hdf5_version}
    for name in ("torch", "mpi4py"):
        module = sys.modules.get(name)
        found = getattr(module, "__version__", None) if module else None
        if found is None:
            try:
                found = metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        versions[name] = str(found)
    loaded_mpi = sys.modules.get("mpi4py.MPI")
    if not mpi_library and loaded_mpi is not None:
        mpi_library = loaded_mpi.Get_library_version().splitlines()[0]
    if mpi_library:
        versions["mpi_library"] = mpi_library.strip()
    return versions


SLURM_KEYS = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
              "SLURM_RESTART_COUNT", "SLURM_JOB_NODELIST")
"""What a job records of its SLURM allocation, to match a job row with the scheduler's."""


def slurm_ids() -> dict[str, str]:
    return {k: os.environ[k] for k in SLURM_KEYS if k in os.environ}
