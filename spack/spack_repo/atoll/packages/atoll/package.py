# Atoll's Spack recipe. spack.yaml builds it from this checkout (a develop spec), so it names no
# download: the dependencies below are pyproject.toml's, in Spack's names (a test compares them).
from spack_repo.builtin.build_systems.python import PythonPackage

from spack.package import *


class Atoll(PythonPackage):
    """Asynchronous island-model evolutionary hyperparameter search over MPI, with
    DistributedDataParallel workers and crash-safe HDF5 records."""

    license("BSD-3-Clause")

    version("0.1.0")

    variant("torch", default=True, description="torch models: DDP workers, the built-in classifier")

    depends_on("python@3.11:", type=("build", "run"))
    depends_on("py-setuptools@77:", type="build")

    depends_on("py-numpy@1.26:", type=("build", "run"))
    depends_on("py-click@8.1:", type=("build", "run"))
    depends_on("py-h5py@3.10:", type=("build", "run"))
    depends_on("py-mpi4py@4.0:", type=("build", "run"))
    depends_on("py-rich@13.0:", type=("build", "run"))

    with when("+torch"):
        # pyproject.toml asks for the pip wheels tested on the development machines (torch
        # 2.14.1); Spack's newest py-torch is older, and no torch floor has been tested here.
        depends_on("py-torch@2: +distributed", type=("build", "run"))
        depends_on("py-torchvision", type=("build", "run"))
        depends_on("py-scikit-learn@1.4:", type=("build", "run"))
