"""Software versions for the run record, found without importing heavy packages."""

from __future__ import annotations

import platform
import sys
from importlib import metadata

import atoll

_PACKAGES = ("numpy", "mpi4py", "h5py", "click", "torch", "torchvision")


def software_versions() -> dict[str, str]:
    """Versions of Atoll, Python, the key packages, HDF5 and the MPI library.

    torch's version comes from package metadata, so recording it never imports torch.
    """
    versions = {"atoll": atoll.__version__, "python": platform.python_version(),
                "platform": platform.platform()}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    if "h5py" in sys.modules or versions["h5py"] != "not installed":
        import h5py

        versions["hdf5"] = h5py.version.hdf5_version
    if "mpi4py.MPI" in sys.modules:
        from mpi4py import MPI

        versions["mpi_library"] = MPI.Get_library_version().splitlines()[0].strip()
    return versions
