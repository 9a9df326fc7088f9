"""The environment a command objective's rank starts its command with: the worker as a world.

A command is a torchrun-style script, one DDP job per individual in a world of the worker's
ranks. So it gets all of torchrun's variables for that world (not only the ``env://`` ones:
``TORCHELASTIC_RUN_ID`` is how torch, and Lightning before it looks at SLURM, tell that
torchrun started a process; ``GROUP_RANK`` is the node's index), and it loses the variables by
which an MPI launcher (mpirun, srun's PMIx or PMI) tells a process its place in the MPI job:
with them, a script whose library calls ``MPI_Init`` (mpi4py; Lightning's search for an MPI
world) would join the job as a second copy of the rank and corrupt the rank's own MPI state.
Without them its ``MPI_Init`` starts a world of its own. The scheduler's
variables (``SLURM_*``) stay: the job's id, its CPUs per task.

GPUs as torchrun gives them: every rank of the worker on a node sees the same list, the worker's
GPUs on that node with each rank's first at its ``LOCAL_RANK``, so a script's ``cuda:LOCAL_RANK``
is the GPU this rank would use for a Python objective (``evaluation.process_group.choose_device``).
A rank's share is the GPUs the launcher gave it alone (``--gpus-per-task``), or of a list all
ranks of its node were given, one when the job has a rank per GPU there, and more when it has
fewer ranks than GPUs (all of them for the node's only rank: a command that is itself
``torchrun --nproc-per-node 4 ...`` gets the node's 4). Inherited as it is, a rank's
``CUDA_VISIBLE_DEVICES`` would send ``cuda:LOCAL_RANK`` to a GPU another worker uses (the job's
list on every rank) or to none at all (one GPU per task).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mpi4py import MPI

    from atoll.engine.topology import NodePlace

LAUNCHER_PREFIXES = ("PMIX_", "PMI_", "PRTE_", "HYDRA_", "PALS_", "MPI_LOCALRANKID",
                     "MPI_LOCALNRANKS", "MV2_COMM_WORLD_", "MPIRUN_")
"""Names by which Open MPI's PRRTE, Slurm's PMIx and PMI-2, MPICH's Hydra, Cray's PALS and
MVAPICH tell a process its rank in the job."""
OMPI_KEPT = ("OMPI_MCA_", "OMPI_ALLOW_RUN_AS_ROOT")
"""Open MPI's own settings, which a command's own MPI may use too; its other ``OMPI_*``
variables describe the job (``OMPI_COMM_WORLD_RANK``, ``OMPI_UNIVERSE_SIZE``, ...)."""


def is_launcher_variable(name: str) -> bool:
    if name.startswith("OMPI_"):
        return not name.startswith(OMPI_KEPT)
    return name.startswith(LAUNCHER_PREFIXES)


NVIDIA_GPUS = "/proc/driver/nvidia/gpus"
"""One entry per NVIDIA GPU of the node, whatever CUDA_VISIBLE_DEVICES says (no CUDA needed)."""


@contextmanager
def command_environment(inherited: Mapping[str, str], comm: MPI.Comm, run_id: str,
                        node: NodePlace) -> Iterator[dict[str, str]]:
    """The rank's environment without the MPI launcher's variables, with torchrun's for the
    worker's world, while the leader holds ``MASTER_PORT`` (collective on the worker's
    communicator: one allgather). ``node``: where the rank sits among the job's ranks on its
    node, by which it takes its share of the GPUs."""
    with _held_port() if comm.Get_rank() == 0 else nullcontext(0) as port:
        env = {name: value for name, value in inherited.items()
               if not is_launcher_variable(name)}
        share = gpu_share(inherited.get("CUDA_VISIBLE_DEVICES"), node, nvidia_gpu_count())
        env.update(torchrun_variables(comm, port, run_id, share))
        env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")  # torchrun's default
        yield env


def torchrun_variables(comm: MPI.Comm, port: int, run_id: str,
                       share: tuple[str, ...] = ()) -> dict[str, str]:
    """torchrun's variables for this rank in a world of the worker's ranks, one agent per
    host, with the leader's ``port``, and ``CUDA_VISIBLE_DEVICES`` made of the GPU ``share``
    of each of the worker's ranks on this host when each has one (collective on the worker's
    communicator)."""
    rank, host = comm.Get_rank(), socket.gethostname()
    seen: list[tuple[str, int, tuple[str, ...]]] = comm.allgather((host, port, share))
    leader_host, port, _ = seen[0]
    hosts = list(dict.fromkeys(h for h, _, _ in seen))  # in the order of their first rank
    on_my_host = [r for r, (h, _, _) in enumerate(seen) if h == host]
    world = str(len(seen))
    gpus = worker_gpus([seen[r][2] for r in on_my_host])
    return {**({"CUDA_VISIBLE_DEVICES": gpus} if gpus else {}),
            "RANK": str(rank), "WORLD_SIZE": world,
            "LOCAL_RANK": str(on_my_host.index(rank)), "LOCAL_WORLD_SIZE": str(len(on_my_host)),
            "GROUP_RANK": str(hosts.index(host)), "GROUP_WORLD_SIZE": str(len(hosts)),
            "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": world, "ROLE_NAME": "default",
            "MASTER_ADDR": "127.0.0.1" if len(hosts) == 1 else leader_host,
            "MASTER_PORT": str(port), "TORCHELASTIC_RUN_ID": run_id,
            "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
            "TORCHELASTIC_USE_AGENT_STORE": "False"}  # rank 0's script hosts the store


def gpu_share(visible: str | None, node: NodePlace, count: int | None) -> tuple[str, ...]:
    """This rank's GPUs as ``CUDA_VISIBLE_DEVICES`` names them, of those it sees
    (``visible``: its ``CUDA_VISIBLE_DEVICES``; when unset, the node's ``count``): all of them
    when the launcher gave each rank its own (``node.same_gpus`` false); else, of the list all
    ``node.ranks`` ranks share, every ``node.ranks``-th from the rank's own, so its first is
    the one a Python objective uses, and one (shared) when the node has as many ranks as GPUs
    or more. Empty without any."""
    if visible is None:
        listed = [str(index) for index in range(count or 0)]
    else:
        listed = [entry.strip() for entry in visible.split(",") if entry.strip()]
        if listed == ["NoDevFiles"]:  # Slurm's word for "no GPU granted"
            listed = []
    if not listed or not node.same_gpus:
        return tuple(listed)
    if node.ranks >= len(listed):
        return (listed[node.rank % len(listed)],)
    return tuple(listed[node.rank::node.ranks])


def worker_gpus(shares: list[tuple[str, ...]]) -> str | None:
    """The ``CUDA_VISIBLE_DEVICES`` of the worker's ranks on one host, in local-rank order:
    each rank's first GPU, then each one's second, ..., so that ``cuda:LOCAL_RANK`` is the
    rank's first. None leaves each rank its own: when one of them has no GPU, or two share one
    (the doctor fails such a layout; CUDA would stop reading the list at the repeat)."""
    if not shares or not all(shares):
        return None
    gpus = [share[k] for k in range(max(map(len, shares))) for share in shares if k < len(share)]
    return ",".join(gpus) if len(set(gpus)) == len(gpus) else None


def nvidia_gpu_count() -> int | None:
    """The node's NVIDIA GPUs as its driver lists them, or None without the driver."""
    try:
        return len(os.listdir(NVIDIA_GPUS))
    except OSError:
        return None


@contextmanager
def _held_port() -> Iterator[int]:
    """A port the OS picked, held for the command's store: bound with ``SO_REUSEADDR`` and
    never listening, it is taken by no other process's bind (an OS-picked port or this one),
    while the script's store (which binds with ``SO_REUSEADDR`` too: libuv's and torch's own
    both do) may bind it and listen."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as hold:
        hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        hold.bind(("", 0))
        yield int(hold.getsockname()[1])
