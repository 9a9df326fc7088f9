"""One job of a search: set up ranks, run the island loops, record, and summarise.

Collective over the communicator it is given (``MPI.COMM_WORLD`` from the CLI). Errors the user
can fix are found on rank 0 where possible and shared with every rank, so that all ranks stop
with the same one-line message instead of some of them hanging.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from atoll import record
from atoll.config import Config, apply_overrides, config_to_dict, parse_config
from atoll.context import Context
from atoll.distributed import close_worker_group
from atoll.errors import AtollError, ConfigError
from atoll.evaluation import Objective, evaluate
from atoll.evolution import default_propagator
from atoll.individual import Individual, Status
from atoll.island import Budget, IslandLoop, IslandStats, MigrationPolicy, breeding_rng
from atoll.keeper import TopWeights, prune_to_top
from atoll.objectives.loader import load_objective
from atoll.population import Population
from atoll.protocol import Codec, Mailbox
from atoll.record.run import software_versions
from atoll.restore import completed_count, restore_population
from atoll.stopping import EXIT_STOPPED, StopFlag
from atoll.topology import Layout, Topology, build_topology, plan_layout
from atoll.worker import WorkerLink

if TYPE_CHECKING:
    from mpi4py import MPI

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class JobSummary:
    """What a finished job reports (the same on every rank)."""

    run_dir: Path
    job: int
    evaluations: int
    wall_seconds: float  # the search: from a barrier after setup to the end of the drain,
    # the log's last flush and the agreement on stopping (setup and results.h5 not counted)
    objective_seconds: float  # inside objectives, summed over workers
    first_evaluation_seconds: float  # from the job's start (before setup) to the first call
    results_file: Path | None
    exit_code: int  # 0: the run's budget is spent; EXIT_STOPPED: resume to continue


LAYOUT_KEYS = ("search.ranks_per_worker", "search.islands", "search.wall_time",
               "record.flush_interval")
"""Settings that belong to a job, not to the run: a resume may change them."""


@dataclass(frozen=True)
class JobPlan:
    """What rank 0 decided before any work starts, shared with every rank."""

    config: Config
    budget: int  # evaluations the whole run completes
    resumed: bool  # whether the run exists already
    config_text: str = ""  # the config as given, recorded for a new run
    job: int = -1  # set by _begin, like the two below
    done: int = 0  # evaluations completed by earlier jobs
    next_id: int = 0  # first individual id this job may use

    def to_plain(self) -> dict[str, Any]:
        """Plain data to broadcast (a Config holds read-only mappings pickle refuses)."""
        return {**{f.name: getattr(self, f.name) for f in fields(self)},
                "config": config_to_dict(self.config)}

    @classmethod
    def from_plain(cls, plain: dict[str, Any]) -> JobPlan:
        return cls(**{**plain, "config": parse_config(plain["config"])})


def run_search(config: Config, run_dir: Path, comm: MPI.Comm, *,
               config_text: str = "") -> JobSummary:
    """Start a search in ``run_dir``, or continue the run there if it is the same search.

    Collective over ``comm``. A run directory holding a different search is an error.
    """
    paths = record.RunPaths(run_dir)
    start = time.time()

    def plan() -> JobPlan:
        if paths.run_file.exists():
            info = record.check_run(paths, config.space)
            _same_search(paths, info.config_table, config)
            return JobPlan(config, info.budget, resumed=True)
        record.check_new_run_dir(paths)
        workers = comm.Get_size() // config.search.ranks_per_worker
        return JobPlan(config, _budget(config, workers), resumed=False, config_text=config_text)

    return _run_job(paths, comm, plan, start)


def resume_search(run_dir: Path, comm: MPI.Comm, overrides: Sequence[str] = ()) -> JobSummary:
    """Continue the run in ``run_dir`` until its budget is spent, under this job's layout.

    ``overrides`` may change only :data:`LAYOUT_KEYS`; the search itself stays the run's.
    """
    paths = record.RunPaths(run_dir)
    start = time.time()

    def plan() -> JobPlan:
        info = record.check_run(paths)
        for item in overrides:
            key = item.partition("=")[0].strip()
            if key not in LAYOUT_KEYS:
                raise ConfigError(f"--set {item!r}: a resume may change only "
                                  f"{', '.join(LAYOUT_KEYS)}; start a new run to change {key}")
        config = parse_config(apply_overrides(info.config_table, overrides))
        return JobPlan(config, info.budget, resumed=True)

    return _run_job(paths, comm, plan, start)


def _budget(config: Config, workers: int) -> int:
    total = config.search.generations * workers
    return min(total, config.search.max_evaluations) if config.search.max_evaluations else total


def _same_search(paths: record.RunPaths, stored: dict[str, Any], config: Config) -> None:
    """Refuse to continue a run with settings other than the job-level ones changed."""
    given = config_to_dict(config)
    for section, values in given.items():
        old_values = stored.get(section)
        items = values.items() if isinstance(values, dict) else [(None, values)]
        for key, value in items:
            dotted = section if key is None else f"{section}.{key}"
            old = old_values if key is None else (old_values or {}).get(key)
            if dotted not in LAYOUT_KEYS and section != "space" and old != value:
                raise ConfigError(
                    f"{paths.run_dir}: holds a run with {dotted} = {old!r}, not {value!r}; "
                    f"continue it with 'atoll resume {paths.run_dir}' or use a new run directory")


def _begin(paths: record.RunPaths, plan: JobPlan, layout: Layout, hosts: list[str],
           start: float) -> JobPlan:
    """The first write of a job: create the run if new, count earlier work, add this job."""
    done, next_id = 0, 0
    if plan.resumed:
        record.check_room(paths, layout.workers)
        individuals = record.read_completed(paths.run_dir)
        done = completed_count(individuals)
        next_id = int(individuals["id"].max()) + 1 if len(individuals) else 0
    else:
        record.create_run(paths, config_table=config_to_dict(plan.config),
                          config_text=plan.config_text, space=plan.config.space,
                          budget=plan.budget)
    job = record.begin_job(paths, layout=layout.as_dict(), hosts=hosts,
                           versions=software_versions(_mpi_library()), slurm=_slurm_ids(),
                           start=start)
    return replace(plan, job=job, done=done, next_id=next_id)


def _run_job(paths: record.RunPaths, comm: MPI.Comm, plan: Callable[[], JobPlan],
             t0: float) -> JobSummary:
    """Check everything (read only), then begin the job in the record and run it."""
    hosts = comm.gather(_hostname(), root=0) or []
    draft = JobPlan.from_plain(_on_root(comm, lambda: plan().to_plain()))
    config = draft.config
    layout = _on_all(comm, lambda: plan_layout(
        comm.Get_size(), config.search.ranks_per_worker, config.search.islands))
    objective = _on_all(comm, lambda: load_objective(config.objective.name))
    _on_root(comm, lambda: _preflight(objective, config))
    job = JobPlan.from_plain(_on_root(
        comm, lambda: _begin(paths, draft, layout, hosts, t0).to_plain()))
    topo = build_topology(comm, config.search.ranks_per_worker, config.search.islands)
    stop = StopFlag(comm).install()
    if config.search.wall_time:
        stop.deadline = t0 + config.search.wall_time
    remaining = max(job.budget - job.done, 0)
    budget = Budget(share(remaining, topo.layout.workers)[topo.worker], stop.requested)
    try:
        run_worker = _prepare_worker(job, paths, topo, objective, stop)
        comm.Barrier()  # the search (and its wall time) starts together on every rank
        start = time.time()
        stats = run_worker(budget)
    finally:
        stopped = stop.close()
    wall = time.time() - start
    gathered = [s for s in comm.allgather(stats if topo.is_leader else None) if s is not None]
    completed = sum(s.completed for s in gathered)
    exit_code = 0 if job.done + completed >= job.budget else EXIT_STOPPED
    if stopped or exit_code:
        log.warning("job stopped early (%s): %d of %d evaluations done; exit code %d, resume "
                    "with 'atoll resume %s'", stop.reason or "wall time", job.done + completed,
                    job.budget, exit_code, paths.run_dir)
    results = _on_root(comm, lambda: _finish(paths, job.job, exit_code, config))
    return JobSummary(
        run_dir=paths.run_dir, job=job.job, evaluations=sum(s.evaluations for s in gathered),
        wall_seconds=wall, objective_seconds=sum(s.objective_seconds for s in gathered),
        first_evaluation_seconds=min((s.first_evaluation for s in gathered if s.evaluations),
                                     default=start) - t0,
        results_file=results, exit_code=exit_code)


def share(total: int, workers: int) -> list[int]:
    """Split ``total`` evaluations as evenly as possible; the first workers take the rest."""
    return [total // workers + (1 if w < total % workers else 0) for w in range(workers)]


def _prepare_worker(plan: JobPlan, paths: record.RunPaths, topo: Topology,
                    objective: Objective, stop: StopFlag) -> Callable[[Budget], IslandStats]:
    """Everything a rank sets up before the search (restore, log files, operators); returns
    the search itself, which closes what was set up when it ends."""
    config, job = plan.config, plan.job
    codec = Codec(config.space)
    link = WorkerLink(topo.worker_comm, codec)
    # Read earlier jobs before this job's files exist, so no file is open twice in a process.
    population = _on_all(topo.world, lambda: _restored(plan, paths, topo)
                         if topo.is_leader else None)
    log_file = _on_all(topo.world, lambda: record.WorkerLog(
        paths.worker_file(job, topo.worker), config.space, job=job, worker=topo.worker,
        flush_interval=config.record.flush_interval) if topo.is_leader else None)
    keeper = TopWeights(paths, config.record.top_models) if topo.is_leader else None
    evaluator = _make_evaluator(config, topo, objective, log_file, keeper, stop)
    if not topo.is_leader:
        def follow(budget: Budget) -> IslandStats:
            try:
                link.follow(evaluator)
            finally:
                close_worker_group()
            return IslandStats()
        return follow
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
        rng=breeding_rng(config.seed, job, topo.worker), id_base=plan.next_id,
        population=population)

    def lead(budget: Budget) -> IslandStats:
        finished = False
        try:
            stats = loop.run(budget)
            finished = True
            return stats
        finally:
            link.stop()
            log_file.close(loop.population if finished else None)
            close_worker_group()
    return lead


def _make_evaluator(config: Config, topo: Topology, objective: Objective,
                    log_file: record.WorkerLog | None, keeper: TopWeights | None,
                    stop: StopFlag) -> Callable[[Individual], None]:
    data_dir = Path(config.objective.data_dir) if config.objective.data_dir else None
    sink = log_file.add_epoch if log_file is not None else None
    weights = keeper.offer if keeper is not None else None

    shared = topo.worker_comm.Get_size() > 1  # a multi-rank worker

    def should_stop() -> bool:
        """The same answer on every rank of the worker (one small allreduce per epoch)."""
        return stop.agreed(topo.worker_comm)

    def evaluator(ind: Individual) -> None:
        ctx = Context(comm=topo.worker_comm, individual_id=ind.id, seed=config.seed,
                      data_dir=data_dir,
                      options=config.objective.options, backend=config.distributed.backend,
                      local_rank=topo.local_rank,
                      timeout=config.distributed.timeout, _sink=sink, _weights=weights,
                      _should_stop=should_stop)
        ind.started = time.time()
        ind.loss, ind.status, ind.error = evaluate(objective, ind.params, ctx,
                                                   config.search.eval_timeout)
        if shared:
            _agree_on_failure(topo.worker_comm, ind)
        ind.finished = time.time()
        if ctx.interrupted:
            ind.status, ind.error = Status.INTERRUPTED, "stopped early: the job was asked to stop"

    return evaluator


def _preflight(objective: Objective, config: Config) -> None:
    """An objective may check its options and data once before the job begins, through a
    ``preflight(options, data_dir, parameter_names)`` attribute, so that bad input stops the
    job with one line instead of failing every individual."""
    check = getattr(objective, "preflight", None)
    if check is not None:
        check(config.objective.options, config.objective.data_dir or None, config.space.names)


def _agree_on_failure(comm: MPI.Comm, ind: Individual) -> None:
    """If any rank of the worker failed, the individual failed on every rank.

    Every failing rank's error is recorded (a partner that waited in a collective fails by
    timeout too). The worker's process group may be out of step then: it is rebuilt on next use.
    """
    errors = comm.allgather(ind.error if ind.status == Status.FAILED else "")
    failed = [f"rank {rank}: {error}" for rank, error in enumerate(errors) if error]
    if not failed:
        return
    if failed != [f"rank 0: {ind.error}"]:
        ind.loss, ind.status, ind.error = float("nan"), Status.FAILED, "; ".join(failed)[:2000]
    close_worker_group()


def _restored(plan: JobPlan, paths: record.RunPaths, topo: Topology) -> Population | None:
    if not plan.resumed:
        return None
    individuals, migrations = record.read_history(paths.run_dir, plan.job)
    return restore_population(individuals, migrations, plan.config.space, topo.layout,
                              topo.island)


def _finish(paths: record.RunPaths, job: int, exit_code: int, config: Config) -> Path:
    """Rank 0 closes the job: its end in run.h5, results.h5, and the run's top weights."""
    record.end_job(paths, job, stop=time.time(), exit_code=exit_code)
    results = record.consolidate(paths)
    if paths.model_files():
        individuals = record.read_completed(paths.run_dir)
        losses = dict(zip(individuals["id"].tolist(), individuals["loss"].tolist(), strict=True))
        prune_to_top(paths, losses, config.record.top_models)
    return results


def _hostname() -> str:
    from mpi4py import MPI

    return MPI.Get_processor_name()


def _mpi_library() -> str:
    from mpi4py import MPI

    return MPI.Get_library_version().splitlines()[0]


def _slurm_ids() -> dict[str, str]:
    import os

    keys = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT",
            "SLURM_JOB_NODELIST")
    return {k: os.environ[k] for k in keys if k in os.environ}


class PeerError(RuntimeError):
    """Another rank failed with an unexpected error (a bug); its message is attached."""


def _on_root(comm: MPI.Comm, action: Callable[[], T]) -> T:
    """Run ``action`` on rank 0 and give every rank its result, or raise its error everywhere.

    User errors become the same one-line AtollError on every rank. An unexpected exception is
    re-raised on rank 0 with its traceback while the other ranks raise PeerError: never a hang.
    """
    result: Any = None
    error: tuple[bool, str] | None = None
    caught: Exception | None = None
    if comm.Get_rank() == 0:
        try:
            result = action()
        except Exception as exc:  # noqa: BLE001 - shared below, then raised on every rank
            caught, error = exc, _shared(exc)
    result, error = comm.bcast((result, error), root=0)
    _raise_shared([error] if error else [], caught)
    return result


def _on_all(comm: MPI.Comm, action: Callable[[], T]) -> T:
    """Run ``action`` on every rank; if it fails anywhere, every rank raises the first error."""
    result: Any = None
    error: tuple[bool, str] | None = None
    caught: Exception | None = None
    try:
        result = action()
    except Exception as exc:  # noqa: BLE001 - shared below, then raised on every rank
        caught, error = exc, _shared(exc)
    _raise_shared([e for e in comm.allgather(error) if e is not None], caught)
    return result


def _shared(exc: Exception) -> tuple[bool, str]:
    """(is a user error, one-line message) for the other ranks."""
    if isinstance(exc, (AtollError, OSError)):
        return True, _message(exc)
    return False, f"{type(exc).__name__}: {exc}".splitlines()[0]


def _raise_shared(errors: list[tuple[bool, str]], caught: Exception | None) -> None:
    if not errors:
        return
    user, message = errors[0]
    if user:
        raise AtollError(message)
    if caught is not None:
        raise caught
    raise PeerError(f"another rank failed: {message}")


def _message(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror or exc}"
    return str(exc)
