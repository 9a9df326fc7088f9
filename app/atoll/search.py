"""One job of a search: set up ranks, run the island loops, record, and summarise.

Collective over the communicator it is given (``MPI.COMM_WORLD`` from the CLI). Errors the user
can fix are found on rank 0 where possible and shared with every rank, so that all ranks stop
with the same one-line message instead of some of them hanging.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from atoll import record
from atoll.config import Config, config_to_dict
from atoll.context import Context
from atoll.errors import AtollError
from atoll.evaluation import Objective, evaluate
from atoll.evolution import default_propagator
from atoll.individual import Individual
from atoll.island import Budget, IslandLoop, IslandStats, MigrationPolicy
from atoll.objectives.loader import load_objective
from atoll.protocol import Codec, Mailbox
from atoll.topology import Topology, build_topology
from atoll.worker import WorkerLink

if TYPE_CHECKING:
    from mpi4py import MPI

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class JobSummary:
    """What a finished job reports on rank 0 (``None`` fields on other ranks)."""

    run_dir: Path
    job: int
    evaluations: int
    wall_seconds: float
    objective_seconds: float
    first_evaluation_seconds: float
    results_file: Path | None


def run_search(config: Config, run_dir: Path, comm: MPI.Comm, *, config_text: str = "",
               stop_requested: Callable[[], bool] = lambda: False) -> JobSummary:
    """Run a new search in ``run_dir`` on every rank of ``comm`` and return the job summary."""
    t0 = time.time()
    paths = record.RunPaths(run_dir)
    topo = build_topology(comm, config.search.ranks_per_worker, config.search.islands)
    objective = _on_all(comm, lambda: load_objective(config.objective.name))
    hosts = comm.gather(_hostname(), root=0)
    job = _on_root(comm, lambda: _create_run(paths, config, config_text, topo, hosts, t0))
    workers = topo.layout.workers
    total = config.search.generations * workers
    if config.search.max_evaluations:
        total = min(total, config.search.max_evaluations)
    deadline = t0 + config.search.wall_time if config.search.wall_time else float("inf")
    budget = Budget(share(total, workers)[topo.worker], deadline, stop_requested)
    comm.Barrier()
    start = time.time()
    stats = _run_worker(config, paths, job, topo, objective, budget)
    comm.Barrier()
    wall = time.time() - start
    gathered = comm.gather(stats if topo.is_leader else None, root=0)
    results = _on_root(comm, lambda: _finish(paths, job))
    leaders = [s for s in gathered or [] if s is not None]
    return JobSummary(
        run_dir=run_dir, job=job, evaluations=sum(s.evaluations for s in leaders),
        wall_seconds=wall, objective_seconds=sum(s.objective_seconds for s in leaders),
        first_evaluation_seconds=min((s.first_evaluation for s in leaders if s.evaluations),
                                     default=start) - t0,
        results_file=results)


def share(total: int, workers: int) -> list[int]:
    """Split ``total`` evaluations as evenly as possible; the first workers take the rest."""
    return [total // workers + (1 if w < total % workers else 0) for w in range(workers)]


def _run_worker(config: Config, paths: record.RunPaths, job: int, topo: Topology,
                objective: Objective, budget: Budget) -> IslandStats:
    codec = Codec(config.space)
    link = WorkerLink(topo.worker_comm, codec)
    log_file = _on_all(topo.world, lambda: record.WorkerLog(
        paths.worker_file(job, topo.worker), config.space, job=job, worker=topo.worker,
        flush_interval=config.record.flush_interval) if topo.is_leader else None)
    evaluator = _make_evaluator(config, topo, objective, log_file)
    if not topo.is_leader:
        link.follow(evaluator)
        return IslandStats()
    assert topo.leaders is not None and log_file is not None
    pop_size = config.evolution.population_size or 2 * len(topo.island_workers)
    ev = config.evolution
    propagator = default_propagator(
        config.space, pop_size, crossover=ev.crossover, mutation=ev.mutation,
        random_init=ev.random_init, sigma_factor=ev.sigma_factor, selection=ev.selection,
        tournament_size=ev.tournament_size)

    def hand_out_and_evaluate(ind: Individual) -> None:
        link.hand_out(ind)
        evaluator(ind)

    loop = IslandLoop(
        layout=topo.layout, worker=topo.worker, mailbox=Mailbox(topo.leaders, codec),
        propagator=propagator, evaluate=hand_out_and_evaluate, recorder=log_file,
        migration=MigrationPolicy(config.migration.mode, config.migration.probability,
                                  config.migration.migrants),
        rng=np.random.default_rng([config.seed, job, topo.worker]))
    try:
        return loop.run(budget)
    finally:
        link.stop()
        log_file.close()


def _make_evaluator(config: Config, topo: Topology, objective: Objective,
                    log_file: record.WorkerLog | None) -> Callable[[Individual], None]:
    data_dir = Path(config.objective.data_dir) if config.objective.data_dir else None
    sink = log_file.add_epoch if log_file is not None else None

    def evaluator(ind: Individual) -> None:
        ctx = Context(comm=topo.worker_comm, individual_id=ind.id,
                      rng=np.random.default_rng([config.seed, ind.id]), data_dir=data_dir,
                      options=config.objective.options, _sink=sink)
        ind.started = time.time()
        ind.loss, ind.status, ind.error = evaluate(objective, ind.params, ctx)
        ind.finished = time.time()

    return evaluator


def _create_run(paths: record.RunPaths, config: Config, config_text: str, topo: Topology,
                hosts: list[str], start: float) -> int:
    from atoll.versions import software_versions

    record.create_run(paths, config_table=config_to_dict(config), config_text=config_text,
                      space=config.space)
    return record.begin_job(paths, layout=topo.layout.as_dict(), hosts=hosts,
                            versions=software_versions(), slurm=_slurm_ids(), start=start)


def _finish(paths: record.RunPaths, job: int) -> Path:
    record.end_job(paths, job, stop=time.time(), exit_code=0)
    return record.consolidate(paths)


def _hostname() -> str:
    from mpi4py import MPI

    return MPI.Get_processor_name()


def _slurm_ids() -> dict[str, str]:
    import os

    keys = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT",
            "SLURM_JOB_NODELIST")
    return {k: os.environ[k] for k in keys if k in os.environ}


def _on_root(comm: MPI.Comm, action: Callable[[], T]) -> T:
    """Run ``action`` on rank 0 and give every rank its result, or raise its error everywhere."""
    result: Any = None
    error: str | None = None
    if comm.Get_rank() == 0:
        try:
            result = action()
        except (AtollError, OSError) as exc:
            error = _message(exc)
    result, error = comm.bcast((result, error), root=0)
    if error is not None:
        raise AtollError(error)
    return result


def _on_all(comm: MPI.Comm, action: Callable[[], T]) -> T:
    """Run ``action`` on every rank; if it fails anywhere, every rank raises the first error."""
    result: Any = None
    error: str | None = None
    try:
        result = action()
    except (AtollError, OSError) as exc:
        error = _message(exc)
    errors = [e for e in comm.allgather(error) if e is not None]
    if errors:
        raise AtollError(errors[0])
    return result


def _message(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror or exc}"
    return str(exc)
