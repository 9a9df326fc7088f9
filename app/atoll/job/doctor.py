"""``atoll doctor``: a preflight of an allocation, launched exactly like the search will be.

Each check is a small function that returns table rows (:mod:`atoll.job.doctor_checks`).
:func:`run_doctor` gathers what each rank sees, runs the collective checks (every error becomes
a failed row, never an exception that would leave the other ranks waiting), and rank 0 renders
the table. Every rank returns the same exit code: 0 ready (warnings allowed), 2 a check failed,
i.e. the search as configured would fail here (the code Atoll uses for every "bad input").
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atoll import record
from atoll.collective import one_line
from atoll.config import Config
from atoll.engine.topology import Layout, NodePlace, build_topology, node_place
from atoll.errors import AtollError, described
from atoll.exit_codes import EXIT_BAD_INPUT, EXIT_OK
from atoll.job.doctor_checks import (
    FAIL,
    LOCK_VARIABLE,
    OK,
    SKIP,
    WARN,
    Report,
    Row,
    command_gpu_rows,
    cpu_rows,
    gpu_rows,
    group_rows,
    layout_rows,
    lock_rows,
    mpi_rows,
    paused_checkpoint_rows,
    render,
    space_rows,
)
from atoll.job.plan import JobPlan, budget_spent, plan_new_or_same, run_budget
from atoll.job.preflight import check_torchrun_layout, preflight
from atoll.objectives.launch_env import gpu_share, nvidia_gpu_count, starts_torchrun
from atoll.objectives.loader import objective_of
from atoll.record import RunPaths
from atoll.record.checkpoints import checkpoint_bytes
from atoll.record.claim import STALE_AFTER, holder_of, refusal

if TYPE_CHECKING:
    from mpi4py import MPI

# --- what each rank sees ------------------------------------------------------------------

def node_name(host: str) -> str:
    """The SLURM node name when there is one (several slurmd may share a host), else the host."""
    return os.environ.get("SLURMD_NODENAME") or host


def cpu_view(rank: int, node: str, torch_present: bool,
             command_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The rank's CPUs and threads; ``command_env``: a command objective's ``objective.env``,
    whose OMP_NUM_THREADS (a number) sets the threads of its script, the rank's own being idle."""
    omp = os.environ.get("OMP_NUM_THREADS", "unset")
    threads = int(omp) if omp.isdigit() and int(omp) else 1
    if torch_present:
        import torch

        threads = torch.get_num_threads()
    given = (command_env or {}).get("OMP_NUM_THREADS", "")
    if given.isdigit() and int(given):
        threads, omp = int(given), f"{given} (objective.env)"
    return {"rank": rank, "node": node, "cpus": sorted(os.sched_getaffinity(0)),
            "threads": threads, "omp": omp}


def gpu_view(rank: int, node: str, place: NodePlace, backend: str,
             torch_present: bool) -> dict[str, Any]:
    view: dict[str, Any] = {"rank": rank, "node": node, "device": None, "uuid": None,
                            "name": None, "count": None,
                            "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}
    if not torch_present:
        return view
    import torch

    from atoll.evaluation.process_group import (
        DistributedError,
        choose_backend,
        choose_device,
    )

    view["count"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
    try:
        device = choose_device(choose_backend(backend), place)
    except DistributedError:
        return view  # reported by the process-group check
    if device.type == "cuda":
        view["device"] = device.index
        props = torch.cuda.get_device_properties(device)
        view["name"] = props.name
        view["uuid"] = str(getattr(props, "uuid", "")) or None
    return view


def group_probe(worker_comm: MPI.Comm, worker: int, config: Config,
                place: NodePlace) -> dict[str, Any]:
    """Build the worker's process group the way the search does, then time an all_reduce."""
    from atoll.evaluation.process_group import ProcessGroupOwner

    owner = ProcessGroupOwner(worker_comm, config.distributed.backend, config.distributed.timeout,
                              place)
    probe: dict[str, Any] = {"worker": worker, "backend": "", "build": 0.0, "all_reduce": 0.0,
                             "error": "", "ranks": []}
    start = time.perf_counter()
    try:
        group = owner.get()
        probe["build"] = time.perf_counter() - start
        probe["backend"] = group.backend
        probe["all_reduce"] = _time_all_reduce(group.device)
    except Exception as exc:  # noqa: BLE001 - reported as a failed row with the worker's ranks
        probe["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
    finally:
        owner.close()
    return probe


def _time_all_reduce(device: Any) -> float:
    import torch
    import torch.distributed as dist

    tensor = torch.ones(1024, device=device)
    times = []
    for _ in range(11):
        start = time.perf_counter()
        dist.all_reduce(tensor)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])  # the first one connects


def probe_dir(run_dir: Path) -> Path:
    """The run directory, or the nearest existing directory above it (same filesystem)."""
    here = run_dir.absolute()
    while not here.is_dir() and here != here.parent:
        here = here.parent
    return here


def second_open(path: Path) -> str:
    """Open ``path`` as the search would (locking as HDF5 decides); '' if it opened."""
    import h5py

    try:
        h5py.File(path, "r").close()
    except OSError as exc:
        return str(exc).splitlines()[0]
    return ""


def second_open_elsewhere(path: Path) -> str:
    """:func:`second_open` in another process on this host (one rank alone has no partner)."""
    code = ("import sys, h5py\ntry:\n    h5py.File(sys.argv[1], 'r').close()\n"
            "except OSError as exc:\n    print(str(exc).splitlines()[0])\n"
            "else:\n    print('opened')\n")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=60, check=False)
    out = done.stdout.strip() or (done.stderr.strip().splitlines() or ["no output"])[-1]
    return "" if out == "opened" else out


# --- the collective run -------------------------------------------------------------------

def run_doctor(config: Config, run_dir: Path | None, comm: MPI.Comm) -> Report:
    """Every check, collective over ``comm``; the same exit code on every rank."""
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    host = MPI.Get_processor_name()
    node = node_name(host)
    torch_present = bool(comm.allreduce(importlib.util.find_spec("torch") is not None,
                                        op=MPI.LAND))
    hosts = comm.allgather(host)
    nodes = comm.allgather(node)
    rows: list[Row] = []
    if rank == 0:
        rows += mpi_rows(nodes, MPI.Get_library_version().split(",")[0].strip())
    layout, found = layout_rows(config, size)
    rows += found if rank == 0 else []
    place = node_place(comm)
    command_env = config.objective.env if config.objective.command else None
    cpus = comm.gather(_guarded("CPU threads", lambda: cpu_view(rank, node, torch_present,
                                                                command_env)), root=0)
    gpus = comm.gather(_guarded("GPUs", lambda: gpu_view(
        rank, node, place, config.distributed.backend, torch_present)), root=0)
    if rank == 0:
        rows += _rows_or_errors(cpus, cpu_rows) + _rows_or_errors(gpus, gpu_rows)
    searched = _search_rows(comm, config, run_dir, layout, hosts)
    if rank == 0 and any(r.check == "budget" for r in searched):  # the run's, not a new one's
        rows = [r for r in rows if r.check != "budget"]
    rows += [r for r in searched if r not in rows]  # a bad layout is a layout row already
    if config.objective.command and layout is not None:
        rows += _command_gpus(comm, layout, place)
    rows += _process_groups(comm, config, layout, place, torch_present)
    if run_dir is not None:
        rows += _filesystem(comm, config, layout, run_dir, hosts)
    elif rank == 0:
        rows.append(Row("run directory", SKIP, "no --run-dir given: HDF5 locking and free "
                                               "space not checked"))
    code = EXIT_BAD_INPUT if any(r.status == FAIL for r in rows) else EXIT_OK
    code = comm.bcast(code, root=0)
    header = f"atoll doctor: {size} rank(s) on {len(set(nodes))} host(s)"
    refusal = next((r.detail for r in searched if r.status == FAIL), "")
    return Report(tuple(rows), code, render(rows, header) if rank == 0 else "", refusal)


# --- what the search checks before its job begins ------------------------------------------

def _search_rows(comm: MPI.Comm, config: Config, run_dir: Path | None, layout: Layout | None,
                 hosts: Sequence[str]) -> list[Row]:
    """The search's own checks, in its order and with its functions: the plan (run directory,
    budget, layout) on rank 0, the objective's import on every rank, its preflight on rank 0,
    for torchrun as the command one rank of each worker per node (``hosts``: each rank's).
    A failed row's detail is the line the search prints when it refuses to start (rows on
    rank 0 only)."""
    rank = comm.Get_rank()
    planned = _plan_rows(config, run_dir, comm.Get_size()) if rank == 0 else []
    loaded: list[Any] = []
    errors = comm.gather(_refusal(lambda: loaded.append(
        objective_of(config, run_dir or Path.cwd()))), root=0)
    if rank != 0:
        return []
    failed = [e for e in errors or [] if e]
    if failed:
        return [*planned, Row("objective", FAIL, failed[0])]
    error = _refusal(lambda: preflight(loaded[0], config))
    has = "its preflight passed" if hasattr(loaded[0], "preflight") else "it has no preflight"
    made = "set up" if config.objective.command else "imported"  # a command imports nothing
    return [*planned, Row("objective", FAIL, error) if error else
            Row("objective", OK, f"{config.objective.name}: {made} on every rank; {has}"),
            *_torchrun_rows(config, layout, hosts)]


def _torchrun_rows(config: Config, layout: Layout | None, hosts: Sequence[str]) -> list[Row]:
    """For torchrun as the command: whether each worker has one rank per node."""
    if layout is None or not starts_torchrun(config.objective.command):
        return []
    error = _refusal(lambda: check_torchrun_layout(config, layout, hosts))
    return [Row("command", FAIL, error) if error else
            Row("command", OK, "torchrun as the command: one rank of each worker per node, "
                               "each torchrun told its node's place (PET_*)")]


def _plan_rows(config: Config, run_dir: Path | None, world_size: int) -> list[Row]:
    """The job's plan as the search makes it: a new run, or the same search continued. The
    plan's warnings (islands lowered to fit) are rows already: not logged a second time."""
    planner = logging.getLogger(plan_new_or_same.__module__)
    planner.disabled, before = True, planner.disabled
    try:
        return _planned(config, run_dir, world_size)
    finally:
        planner.disabled = before


def _planned(config: Config, run_dir: Path | None, world_size: int) -> list[Row]:
    if run_dir is None:
        error = _refusal(lambda: record.check_record_fits(config.space))
        return [Row("search space", FAIL, error)] if error else []
    holding = holder_of(run_dir) if run_dir.is_dir() else None
    held: list[Row] = []
    if holding is not None:
        holder, here = holding
        if here:  # the search refuses at once
            return [Row("run directory", FAIL, refusal(run_dir, holder))]
        held = [Row("run directory", WARN, f"{run_dir}: held by a job on another host "
                    f"({holder}); a search waits until its claim is stale ({STALE_AFTER:g} s "
                    "without a heartbeat: the job is gone), and refuses if it is not")]
    return held + _plan_of(config, run_dir, world_size)


def _plan_of(config: Config, run_dir: Path, world_size: int) -> list[Row]:
    found: list[JobPlan] = []
    error = _refusal(lambda: found.append(plan_new_or_same(record.RunPaths(run_dir), config,
                                                             world_size)))
    if error:
        return [Row("layout" if error in _layout_errors(config, world_size) else
                    "run directory", FAIL, error)]
    plan = found[0]
    if plan.nothing_left:  # no failure: a search there runs no job and exits 0
        return [Row("budget", WARN, budget_spent(run_dir, plan,
                                                 "a search here starts no job (exit 0)"))]
    if not plan.resumed:
        return [Row("run directory", OK, f"{run_dir}: a new run")]
    return [Row("run directory", OK, f"{run_dir}: the same search, continued by this job"),
            Row("budget", OK, f"{plan.done} of {plan.budget} evaluations done: "
                              f"{plan.budget - plan.done} left for this job")]


def _layout_errors(config: Config, world_size: int) -> list[str]:
    """The layout row's failure, if any (the plan fails with the same line)."""
    return [r.detail for r in layout_rows(config, world_size)[1] if r.status == FAIL]


def _refusal(action: Callable[[], Any]) -> str:
    """'' if ``action`` passes, else the one line the search prints for its error."""
    try:
        action()
    except (AtollError, OSError) as exc:
        return one_line(exc)
    except Exception as exc:  # noqa: BLE001 - a bug, shown in the table, not a hang
        return described(exc)
    return ""


def _guarded(check: str, action: Callable[[], dict[str, Any]]) -> dict[str, Any] | Row:
    """A rank's facts, or its failure as a row (so that no rank leaves a collective early)."""
    try:
        return action()
    except Exception as exc:  # noqa: BLE001 - shown in the table
        return Row(check, FAIL, f"{type(exc).__name__}: {exc}".splitlines()[0])


def _rows_or_errors(gathered: list[Any] | None, check: Callable[[list[dict[str, Any]]],
                                                                list[Row]]) -> list[Row]:
    gathered = gathered or []
    errors = [g for g in gathered if isinstance(g, Row)]
    return errors[:4] + check([g for g in gathered if not isinstance(g, Row)])


def _command_gpus(comm: MPI.Comm, layout: Layout, place: NodePlace) -> list[Row]:
    """The GPUs each worker's command will see, shared out as a search shares them (by host
    name, as the command's environment is made)."""
    share = gpu_share(os.environ.get("CUDA_VISIBLE_DEVICES"), place, nvidia_gpu_count())
    worker = layout.worker_of_rank(comm.Get_rank())
    seen = comm.gather((worker, socket.gethostname(), share), root=0)
    return command_gpu_rows(seen or []) if comm.Get_rank() == 0 else []


def _process_groups(comm: MPI.Comm, config: Config, layout: Layout | None, place: NodePlace,
                    torch_present: bool) -> list[Row]:
    rank = comm.Get_rank()
    if layout is None or not torch_present:
        why = "the layout does not fit" if layout is None else \
            "torch is not installed (only objectives that use ctx.process_group need it)"
        return [Row("process group", SKIP, why)] if rank == 0 else []
    topo = build_topology(comm, layout)
    probe = group_probe(topo.worker_comm, topo.worker, config, place)
    probe["ranks"] = topo.worker_comm.allgather(rank)
    probes = comm.gather(probe if topo.is_leader else None, root=0)
    return group_rows([p for p in probes or [] if p is not None]) if rank == 0 else []


def _filesystem(comm: MPI.Comm, config: Config, layout: Layout | None, run_dir: Path,
                hosts: list[str]) -> list[Row]:
    """HDF5 locking (rank 0 holds a file, a rank on another host or a process tries it too)
    and free space."""
    rank = comm.Get_rank()
    where = probe_dir(run_dir)
    others = [r for r, h in enumerate(hosts) if h != hosts[0]]
    prober = others[0] if others else 0
    path = where / f".atoll-doctor-{os.getpid()}.h5"
    holder, create_error = None, ""
    if rank == 0:
        import h5py

        try:
            holder = h5py.File(path, "w")
            holder.flush()
        except OSError as exc:
            create_error = str(exc).splitlines()[0]
    path_or_none = comm.bcast(None if create_error else path, root=0)
    probe_error = ""
    if path_or_none is not None and rank == prober:
        probe_error = second_open_elsewhere(path) if prober == 0 else second_open(path_or_none)
    probe_error = comm.bcast(probe_error, root=prober)
    if rank != 0:
        return []
    if holder is not None:
        holder.close()
        path.unlink(missing_ok=True)
    second = f"rank {prober} on {hosts[prober]}" if prober else "another process on this host"
    rows = lock_rows({"dir": where, "env": os.environ.get(LOCK_VARIABLE), "second": second,
                      "create_error": create_error, "refused": "lock" in probe_error.lower(),
                      "probe_error": probe_error})
    if layout is not None:
        largest = checkpoint_bytes(RunPaths(run_dir))[1]
        rows += space_rows(config, layout, where, shutil.disk_usage(where).free, largest)
        rows += paused_checkpoint_rows(config, run_budget(config, layout.workers), largest)
    return rows
