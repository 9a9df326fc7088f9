"""Torch process groups for multi-rank workers: made once per worker, reused for every individual.

Each process belongs to exactly one worker, so the worker's ranks form the process's default
torch.distributed group. The rendezvous store is hosted by the worker leader on a port the
operating system picks (port 0) and is broadcast over MPI, so neither two workers nor two jobs
on one node can collide; it listens on the loopback address when the whole worker is on one
node. The device is the node-local rank among all of the job's ranks on that node (from an MPI
shared-memory split made once per job), never a world rank modulo a GPU count, or the first of
a rank's own GPUs when the launcher gave each its own (``--gpus-per-task``);
``CUDA_VISIBLE_DEVICES`` is respected because torch only sees the devices it lists.

Only objectives that ask for ``ctx.process_group`` or ``ctx.device`` import torch.
"""

from __future__ import annotations

import os
import socket
from collections.abc import MutableMapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from atoll.config import BACKENDS
from atoll.engine.topology import NodePlace
from atoll.errors import AtollError
from atoll.evaluation.alarm import alarm_held

if TYPE_CHECKING:
    import torch
    from mpi4py import MPI

class DistributedError(AtollError):
    """The worker's process group could not be made or failed its check."""


@dataclass(frozen=True)
class WorkerGroup:
    """The torch side of one worker: its backend, this rank's device, and the live store."""

    backend: str
    device: torch.device
    store: Any  # the TCPStore: kept referenced for the group's lifetime

    @property
    def process_group(self) -> Any:
        import torch.distributed as dist

        return dist.group.WORLD


def choose_backend(requested: str) -> str:
    """``auto`` is NCCL when CUDA devices are visible, gloo otherwise."""
    import torch
    import torch.distributed as dist

    if requested not in BACKENDS:
        raise DistributedError(f"distributed.backend: expected one of {', '.join(BACKENDS)}, "
                               f"got {requested!r}")
    if requested != "auto":
        if requested == "nccl" and not torch.cuda.is_available():
            raise DistributedError("distributed.backend: 'nccl' needs CUDA devices and this "
                                   "rank sees none; use 'gloo' or 'auto'")
        return requested
    cuda = torch.cuda.is_available() and dist.is_nccl_available()
    return "nccl" if cuda else "gloo"


def choose_device(backend: str, node: NodePlace) -> torch.device:
    """Under NCCL, the node rank's GPU of the ones the node's ranks were all given, or the
    first of a rank's own (``--gpus-per-task``); else the CPU."""
    import torch

    if backend == "nccl":
        index = node.rank % torch.cuda.device_count() if node.same_gpus else 0
        return torch.device("cuda", index)
    return torch.device("cpu")


class ProcessGroupOwner:
    """The one owner of a worker's torch process group on this rank: it makes the group on
    first use, hands the same one to every individual, and destroys it when a failure may have
    left it out of step or when the job ends.

    A process belongs to one worker, so the group is torch's default (process-wide) group:
    make one owner per process. ``node`` is where this rank sits among the job's ranks on its
    node (see topology).
    """

    def __init__(self, comm: MPI.Comm, backend: str = "auto", timeout: float = 60.0,
                 node: NodePlace | None = None) -> None:
        self.comm = comm
        self.backend = backend
        self.timeout = timeout
        self.node = node or NodePlace()
        self.current: WorkerGroup | None = None
        """The live group, or None before first use and after :meth:`close`."""

    def get(self) -> WorkerGroup:
        """The worker's group, created on first use (collective over the worker's ranks)."""
        if self.current is not None:
            return self.current
        # An evaluation time limit must not cut a collective setup short on one rank only: it
        # is held back until the group exists, then fires in the objective as usual.
        with alarm_held():
            self.current = _create_group(self.comm, self.backend, self.timeout,
                                         self.node)
        return self.current

    def close(self) -> None:
        """Destroy the group and drop its store; the next :meth:`get` makes a new one."""
        if self.current is None:
            return
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        self.current = None


def bind_device(device: torch.device) -> None:
    """Make a GPU the rank's current CUDA device, as torchrun scripts do with ``LOCAL_RANK``:
    NCCL's ``barrier`` and object collectives (``all_gather_object``, ...) and a bare
    ``"cuda"`` or ``.cuda()`` in an objective use the current device, which is otherwise the
    node's first GPU for every rank (a CUDA context of each rank there, and object collectives
    sent from a GPU the rank's communicator does not use)."""
    if device.type == "cuda":
        import torch

        torch.cuda.set_device(device)


NCCL_ERROR_HANDLING = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
CLEAN_UP_ONLY = "2"
"""NCCL's error handling that aborts a failed or timed-out collective's communicator and raises
in the waiting call, without ending the process (torch's default, 3, ends it)."""


def keep_rank_alive_on_nccl_errors(environ: MutableMapping[str, str]) -> None:
    """A partner of a rank whose objective raised waits in a collective until
    ``distributed.timeout``; under torch's default NCCL error handling the watchdog then ends
    the whole process, and with it the MPI job. Clean-up only lets the waiting call raise, the
    evaluation fail and the group be rebuilt, as under gloo. A value you set is kept."""
    environ.setdefault(NCCL_ERROR_HANDLING, CLEAN_UP_ONLY)


def _create_group(comm: MPI.Comm, backend: str, timeout: float, node: NodePlace
                  ) -> WorkerGroup:
    import torch.distributed as dist

    chosen = choose_backend(backend)
    device = choose_device(chosen, node)
    _check_devices(comm, device)
    bind_device(device)
    if chosen == "nccl":
        keep_rank_alive_on_nccl_errors(os.environ)  # read when the group is made
    store = _rendezvous(comm, timeout)
    dist.init_process_group(chosen, store=dist.PrefixStore("atoll", store),
                            rank=comm.Get_rank(), world_size=comm.Get_size(),
                            timeout=timedelta(seconds=timeout))
    group = WorkerGroup(chosen, device, store)
    try:
        _check_all_reduce(comm, group)
    except DistributedError:
        dist.destroy_process_group()
        raise
    return group


def _rendezvous(comm: MPI.Comm, timeout: float) -> Any:
    """A TCPStore on the leader, reachable only where the worker's ranks are.

    The leader binds the listening socket itself (loopback when the worker is on one node,
    else its address on the route to the worker's next host) on a port the OS picks, and hands
    it to the store: torch's own server would listen on every interface.
    """
    from mpi4py import MPI
    from torch.distributed import TCPStore

    hosts = comm.allgather(MPI.Get_processor_name())
    address: tuple[str, int] | None = None
    store = None
    if comm.Get_rank() == 0:
        others = [h for h in hosts if h != hosts[0]]
        host = address_towards(others[0]) if others else "127.0.0.1"
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((host, 0))
        listener.listen(max(128, comm.Get_size()))
        address = (host, listener.getsockname()[1])
        store = TCPStore(host, address[1], comm.Get_size(), is_master=True,
                         timeout=timedelta(seconds=timeout), wait_for_workers=False,
                         master_listen_fd=listener.detach())
    address = comm.bcast(address, root=0)
    if comm.Get_rank() != 0:
        store = TCPStore(address[0], address[1], comm.Get_size(), is_master=False,
                         timeout=timedelta(seconds=timeout))
    return store


def address_towards(peer: str) -> str:
    """This host's address on the route to ``peer`` (a UDP connect picks the route and sends
    nothing). Not the address of this host's own name: many images map it to 127.0.1.1 in
    /etc/hosts, where the peer could not reach it."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((socket.gethostbyname(peer), 9))
            return str(probe.getsockname()[0])
    except OSError:  # the peer's name does not resolve here: the old way
        return socket.gethostbyname(socket.gethostname())


def _check_devices(comm: MPI.Comm, device: torch.device) -> None:
    """Two ranks of one worker on one GPU would deadlock NCCL: refuse that layout."""
    from mpi4py import MPI

    seen = comm.allgather((MPI.Get_processor_name(), str(device)))
    if device.type == "cuda" and len(set(seen)) < len(seen):
        raise DistributedError(
            f"ranks of one worker share a GPU ({seen}); start one rank per GPU, or set "
            "distributed.backend = 'gloo'")


def _check_all_reduce(comm: MPI.Comm, group: WorkerGroup) -> None:
    """A short all_reduce proves the group works before any individual depends on it."""
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    probe = torch.ones(1, device=group.device)
    try:
        dist.all_reduce(probe)
        ok = int(probe.item()) == comm.Get_size()
        problem = "" if ok else f"sum {probe.item()} != {comm.Get_size()}"
    except Exception as exc:  # noqa: BLE001 - reported with hosts and ranks below
        problem = f"{type(exc).__name__}: {exc}".splitlines()[0]
    problems = comm.allgather((comm.Get_rank(), MPI.Get_processor_name(), problem))
    failed = [(r, h, p) for r, h, p in problems if p]
    if failed:
        where = ", ".join(f"rank {r} on {h}: {p}" for r, h, p in failed)
        raise DistributedError(f"the worker's {group.backend} process group failed its "
                               f"all_reduce check ({where})")
