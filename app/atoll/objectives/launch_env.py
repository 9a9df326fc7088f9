"""The environment a command objective's rank starts its command with: the worker as a world.

A command is a torchrun-style script, one DDP job per individual in a world of the worker's
ranks. So it gets all of torchrun's variables for that world (not only the ``env://`` ones:
``TORCHELASTIC_RUN_ID`` is how torch, and Lightning before it looks at SLURM, tell that
torchrun started a process; ``GROUP_RANK`` is the node's index), and it loses the variables by
which an MPI launcher (mpirun, srun's PMIx or PMI) tells a process its place in the MPI job:
with them, a script whose library calls ``MPI_Init`` (mpi4py; Lightning's search for an MPI
world) would join the job as a second copy of the rank and corrupt the rank's own MPI state.
Without them its ``MPI_Init`` starts a world of its own. The scheduler's job variables
(``SLURM_JOB_*``, its CPUs per task) stay; its task variables (``SLURM_PROCID``,
``SLURM_NTASKS``, ...) describe the worker as a step of its own, as ``srun`` would for the
script alone: a script that reads its rank from them before torchrun's (many SLURM recipes do)
then joins the worker's world, where it took the job's rank in the job's world and hung.

A command that is torchrun itself, on a worker of one rank per host, is that host's agent:
torchrun's own environment flags (``PET_NNODES``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR``,
``PET_MASTER_PORT``) place it among the worker's hosts, with its store on the leader's port.

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
import re
import shlex
import socket
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from atoll.errors import ranks_text

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
        slurm_node = (inherited.get("SLURMD_NODENAME") or socket.gethostname()
                      if any(name in inherited for name in SLURM_TASK_VARIABLES) else None)
        variables = torchrun_variables(comm, port, run_id, share, slurm_node)
        per_node = variables.pop("SLURM_NTASKS_PER_NODE", None)
        env.update(variables)
        if "SLURM_NTASKS_PER_NODE" in env:  # the job's request: the worker's when one fits
            if per_node is None:
                del env["SLURM_NTASKS_PER_NODE"]
            else:
                env["SLURM_NTASKS_PER_NODE"] = per_node
        env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")  # torchrun's default
        # A pipe is block-buffered: a Python script's print() would reach Atoll only when it
        # ends, and its epoch lines drive the record, pruning and the checkpoint of a resume.
        env.setdefault("PYTHONUNBUFFERED", "1")
        yield env


TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")


SHELLS = ("sh", "bash", "dash", "zsh", "ksh")
_SHELL_OPERATORS = set(";&|()")
_PREFIXES = ("env", "exec", "nohup", "command")
"""Words that run the command after them (``exec torchrun ...``, ``env A=1 torchrun ...``)."""
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_ENV_ARGUMENTS = ("-u", "--unset", "-C", "--chdir", "-S", "--split-string")
"""env's options that take the next word."""


def starts_torchrun(command: Sequence[str]) -> bool:
    """Whether the command is torchrun itself (``torchrun ...``, ``python -m
    torch.distributed.run ...``): the launcher of a node's processes; also behind ``exec``,
    ``env A=1`` or in any simple command of a shell's ``-c`` script (``sh -c "cd d && exec
    torchrun ..."``)."""
    words = list(command)
    while words and (Path(words[0]).name in _PREFIXES or _ASSIGNMENT.match(words[0])):
        if Path(words.pop(0)).name == "env":
            while words and words[0].startswith("-"):  # env's own options
                words = words[2:] if words[0] in _ENV_ARGUMENTS else words[1:]
    if not words:
        return False
    if Path(words[0]).name in SHELLS:
        script = _shell_script(words[1:])
        return script is not None and any(starts_torchrun(part) for part in script)
    head = words[:4]
    pairs = zip(head, head[1:], strict=False)
    return Path(head[0]).name == "torchrun" or any(
        flag == "-m" and module in TORCHRUN_MODULES for flag, module in pairs)


def _shell_script(arguments: Sequence[str]) -> list[list[str]] | None:
    """The simple commands of a shell's ``-c`` script (split at ``;``, ``&&``, ``|``, ...),
    or None when the shell runs a file or the script does not parse."""
    skip = False
    for i, word in enumerate(arguments):
        if skip:  # the argument of -o, +O, --rcfile ...
            skip = False
            continue
        if word in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            skip = True
            continue
        if word.startswith("--") or word.startswith("+"):
            continue  # a long option (--norc, --login) or one turned off
        if not word.startswith("-"):
            return None
        if "c" in word[1:] and i + 1 < len(arguments):
            try:
                lexer = shlex.shlex(arguments[i + 1], posix=True, punctuation_chars=True)
                lexer.whitespace_split = True
                tokens = list(lexer)
            except ValueError:
                return None
            parts: list[list[str]] = [[]]
            for token in tokens:
                if set(token) <= _SHELL_OPERATORS:
                    parts.append([])
                else:
                    parts[-1].append(token)
            return [part for part in parts if part]
    return None


def crowded_torchrun(where: str) -> str:
    """What is wrong when torchrun is the command of a worker with two ranks on a node
    (``where``: which worker has how many ranks on how many nodes)."""
    return (f"objective.command is torchrun, the launcher of a node's processes, but {where}: "
            "each rank would start a torchrun of its own; run one Atoll rank per node (srun "
            "--ntasks-per-node=1), or set search.ranks_per_worker = 1")


def torchrun_crowding(placed: Sequence[tuple[int, str]]) -> str:
    """'' if every worker has at most one rank per node, else what is wrong for torchrun as
    the command (``placed``: each rank's worker and node)."""
    ranks = Counter(worker for worker, _ in placed)
    nodes = Counter(worker for worker, _ in set(placed))
    crowded = [worker for worker in sorted(ranks) if ranks[worker] > nodes[worker]]
    if not crowded:
        return ""
    first = crowded[0]
    return crowded_torchrun(f"worker {first} has {ranks[first]} ranks on {nodes[first]} "
                            "node(s)" + (f" (workers {ranks_text(crowded)} alike)"
                                         if len(crowded) > 1 else ""))


def torchrun_variables(comm: MPI.Comm, port: int, run_id: str, share: tuple[str, ...] = (),
                       slurm_node: str | None = None) -> dict[str, str]:
    """torchrun's variables for this rank in a world of the worker's ranks, one agent per
    host, with the leader's ``port``; where the worker has one rank per host, torchrun's own
    flags (``PET_*``) for a torchrun started as the command; ``CUDA_VISIBLE_DEVICES`` made of
    the GPU ``share`` of each of the worker's ranks on this host when each has one; and
    Slurm's task variables for a step of the worker's ranks when the rank is a Slurm task
    (``slurm_node``: its node's Slurm name, None outside a task). Collective on the worker's
    communicator."""
    rank, host = comm.Get_rank(), socket.gethostname()
    seen: list[tuple[str, int, tuple[str, ...], str | None]] = comm.allgather(
        (host, port, share, slurm_node))
    leader_host, port, _, _ = seen[0]
    hosts = list(dict.fromkeys(h for h, _, _, _ in seen))  # in the order of their first rank
    on_my_host = [r for r, (h, _, _, _) in enumerate(seen) if h == host]
    world = str(len(seen))
    gpus = worker_gpus([seen[r][2] for r in on_my_host])
    slurm = (slurm_step_variables([node or h for h, _, _, node in seen], rank)
             if any(node is not None for *_, node in seen) else {})
    address = "127.0.0.1" if len(hosts) == 1 else leader_host
    group_rank, nodes = str(hosts.index(host)), str(len(hosts))
    # One rank per host: a command that is torchrun itself is the host's agent, and takes its
    # place among the worker's hosts from these (torchrun's flags given by the environment)
    agent = ({"PET_NNODES": nodes, "PET_NODE_RANK": group_rank, "PET_MASTER_ADDR": address,
              "PET_MASTER_PORT": str(port)} if len(hosts) == len(seen) else {})
    return {**({"CUDA_VISIBLE_DEVICES": gpus} if gpus else {}), **slurm, **agent,
            "RANK": str(rank), "WORLD_SIZE": world,
            "LOCAL_RANK": str(on_my_host.index(rank)), "LOCAL_WORLD_SIZE": str(len(on_my_host)),
            "GROUP_RANK": group_rank, "GROUP_WORLD_SIZE": nodes,
            "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": world, "ROLE_NAME": "default",
            "MASTER_ADDR": address, "MASTER_PORT": str(port), "TORCHELASTIC_RUN_ID": run_id,
            "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
            "TORCHELASTIC_USE_AGENT_STORE": "False"}  # rank 0's script hosts the store


SLURM_TASK_VARIABLES = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_GTIDS",
                        "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NNODES", "SLURM_TASKS_PER_NODE",
                        "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NUM_NODES", "SLURM_STEP_NODELIST",
                        "SLURM_STEP_TASKS_PER_NODE")
"""What ``srun`` sets for a task's place in its step (the job's own stay, e.g.
``SLURM_JOB_NODELIST``, ``SLURM_NODELIST``); ``SLURM_NTASKS_PER_NODE``, the user's request,
is the worker's too where it was set and one count fits the worker's nodes."""


def slurm_step_variables(nodes: list[str], rank: int) -> dict[str, str]:
    """Slurm's task variables for ``rank`` of a step made of the worker's ranks, as ``srun``
    writes them; ``nodes``: each worker rank's node, in rank order (the nodes are numbered in
    the order of their first rank, as torchrun's ``GROUP_RANK``)."""
    names = list(dict.fromkeys(nodes))
    on_node = [r for r, node in enumerate(nodes) if node == nodes[rank]]
    counts = [nodes.count(name) for name in names]
    runs: list[list[int]] = []  # equal counts in a row: Slurm writes "2(x3)"
    for count in counts:
        if runs and runs[-1][0] == count:
            runs[-1][1] += 1
        else:
            runs.append([count, 1])
    per_node = ",".join(f"{c}(x{n})" if n > 1 else str(c) for c, n in runs)
    tasks, nnodes = str(len(nodes)), str(len(names))
    uniform = {"SLURM_NTASKS_PER_NODE": str(counts[0])} if len(set(counts)) == 1 else {}
    return {**uniform, "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(on_node.index(rank)),
            "SLURM_NODEID": str(names.index(nodes[rank])),
            "SLURM_GTIDS": ",".join(map(str, on_node)),
            "SLURM_NTASKS": tasks, "SLURM_NPROCS": tasks, "SLURM_STEP_NUM_TASKS": tasks,
            "SLURM_NNODES": nnodes, "SLURM_STEP_NUM_NODES": nnodes,
            "SLURM_STEP_NODELIST": ",".join(names),
            "SLURM_TASKS_PER_NODE": per_node, "SLURM_STEP_TASKS_PER_NODE": per_node}


def listed_gpus(visible: str | None) -> list[str]:
    """The GPUs a ``CUDA_VISIBLE_DEVICES`` value lists, as it names them (none when unset)."""
    listed = [entry.strip() for entry in (visible or "").split(",") if entry.strip()]
    return [] if listed == ["NoDevFiles"] else listed  # Slurm's word for "no GPU granted"


def gpu_share(visible: str | None, node: NodePlace, count: int | None) -> tuple[str, ...]:
    """This rank's GPUs as ``CUDA_VISIBLE_DEVICES`` names them, of those it sees
    (``visible``: its ``CUDA_VISIBLE_DEVICES``; when unset, the node's ``count``): all of them
    when the launcher gave each rank its own (``node.same_gpus`` false); else, of the list all
    ``node.ranks`` ranks share, every ``node.ranks``-th from the rank's own, so its first is
    the one a Python objective uses, and one (shared) when the node has as many ranks as GPUs
    or more. Empty without any."""
    listed = ([str(index) for index in range(count or 0)] if visible is None
              else listed_gpus(visible))
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
