"""One job of a search: plan it, begin it in the record, run every rank's role, close it.

Collective over the communicator it is given (``MPI.COMM_WORLD`` from the CLI). Errors the user
can fix are found on rank 0 where possible and shared with every rank (:mod:`atoll.collective`),
so that all ranks stop with the same one-line message instead of some of them hanging.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from atoll import record
from atoll.collective import on_all, on_root
from atoll.config import Config, config_to_dict
from atoll.engine.island import Budget, IslandLoop, breeding_rng
from atoll.engine.population import Population
from atoll.engine.protocol import Codec, MpiMailbox
from atoll.engine.restore import restore_population
from atoll.engine.stopping import DISK_FULL, EXIT_DISK_FULL, EXIT_STOPPED, WALL_TIME, StopFlag
from atoll.engine.topology import Topology, build_topology
from atoll.engine.worker import Follower, Leader, WorkerLink
from atoll.errors import AtollError, ObjectiveError, RecordError, described
from atoll.evaluation.call import Objective
from atoll.evaluation.evaluator import WorkerEvaluator
from atoll.evolution.default import island_propagator
from atoll.evolution.pruning import MedianRule
from atoll.individual import Individual, Status
from atoll.job.plan import JobPlan, plan_new_or_same, plan_resume, share
from atoll.logs import rank_log
from atoll.objectives.loader import check_preflight, load_objective
from atoll.record import full
from atoll.record.claim import CLAIM_LOST, STALE_AFTER, Claim, claim
from atoll.record.models import TopWeights, prune_to_top

if TYPE_CHECKING:
    from mpi4py import MPI

log = logging.getLogger(__name__)


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
    exit_code: int  # 0: the run's budget is spent; EXIT_STOPPED: resume to continue;
    # EXIT_DISK_FULL: a record file could not be written, free space and resume
    disk_full: str = ""  # where the disk was full (one line), if it was


def run_search(config: Config, run_dir: Path, comm: MPI.Comm, *,
               config_text: str = "") -> JobSummary:
    """Start a search in ``run_dir``, or continue the run there if it is the same search.

    Collective over ``comm``. A run directory holding a different search is an error.
    """
    paths = record.RunPaths(run_dir)
    return _run_job(paths, comm, lambda: plan_new_or_same(paths, config, comm.Get_size(),
                                                          config_text), new=True)


def resume_search(run_dir: Path, comm: MPI.Comm, overrides: Sequence[str] = ()) -> JobSummary:
    """Continue the run in ``run_dir`` until its budget is spent, under this job's layout.

    ``overrides`` may change only :data:`atoll.job.plan.JOB_KEYS`; the search itself stays
    the run's. A run whose budget is spent runs no job (``JobSummary.job`` is -1).
    """
    paths = record.RunPaths(run_dir)
    return _run_job(paths, comm, lambda: plan_resume(paths, overrides, comm.Get_size()),
                    new=False)


def _run_job(paths: record.RunPaths, comm: MPI.Comm, plan: Callable[[], JobPlan], *,
             new: bool) -> JobSummary:
    """Claim the run directory (one job per run), then check everything (read only), begin the
    job in the record and run it; the claim is given up when the job ends, however it ends."""
    held: list[Claim] = []

    def take() -> None:
        taken = claim(paths.run_dir, create=new)
        held.extend([taken] if taken is not None else [])

    try:
        on_root(comm, take)
        return _claimed_job(paths, comm, plan, held)
    finally:
        for taken in held:
            taken.release()


def _claimed_job(paths: record.RunPaths, comm: MPI.Comm, plan: Callable[[], JobPlan],
                 held: Sequence[Claim]) -> JobSummary:
    t0 = time.time()
    hosts = comm.gather(_hostname(), root=0) or []
    draft = on_root(comm, plan)
    config = draft.config
    if draft.nothing_left:
        log.warning("%s: the run's budget is spent (%d of %d evaluations): no job was started; "
                    "extend it with 'atoll resume %s --set search.evaluations=N'", paths.run_dir,
                    draft.done, draft.budget, paths.run_dir)
        written = on_root(comm, lambda: _results_now(paths))
        return JobSummary(run_dir=paths.run_dir, job=-1, evaluations=0, wall_seconds=0.0,
                          objective_seconds=0.0, first_evaluation_seconds=0.0,
                          results_file=written, exit_code=0)
    beside = [config.objective.config_dir] if config.objective.config_dir else []
    objective = on_all(comm, lambda: load_objective(config.objective.name, beside))
    on_root(comm, lambda: _preflight(objective, config))
    job = on_root(comm, lambda: _begin(paths, draft, hosts, t0, objective))
    topo = build_topology(comm, job.layout)
    with rank_log(paths.log_file(job.job, comm.Get_rank()), rank=comm.Get_rank(),
                  host=_hostname(), worker=topo.worker):
        stop = StopFlag(comm).install()
        for taken in held:
            taken.when_lost(lambda: stop.request(CLAIM_LOST))
        if config.search.wall_time:
            stop.deadline = t0 + config.search.wall_time
        remaining = max(job.budget - job.done, 0)
        budget = Budget(share(remaining, topo.layout.workers)[topo.worker], stop.requested)
        try:
            with full.listening(lambda where: stop.request(DISK_FULL)):
                role = _prepare_worker(job, paths, topo, objective, stop)
                comm.Barrier()  # the search (and its wall time) starts together on every rank
                start = time.time()
                stats = role.run(budget)
        finally:
            stopped = stop.close()
        _refuse_if_taken_over(comm, paths, held)
        wall = time.time() - start
        gathered = [s for s in comm.allgather(stats if topo.is_leader else None) if s is not None]
        disk_full = next((m for m in comm.allgather(full.seen()) if m), "")
        completed = sum(s.completed for s in gathered)
        exit_code = EXIT_DISK_FULL if disk_full else \
            0 if job.done + completed >= job.budget else EXIT_STOPPED
        if disk_full:
            log.warning("job stopped: %s; the rows written before are kept: free some space, "
                        "then resume with 'atoll resume %s' (exit code %d)", disk_full,
                        paths.run_dir, exit_code)
        elif stopped or exit_code:
            log.warning("job stopped early (%s): %d of %d evaluations done; exit code %d, resume "
                        "with 'atoll resume %s'", stop.reason or WALL_TIME, job.done + completed,
                        job.budget, exit_code, paths.run_dir)
        results, exit_code, disk_full = on_root(
            comm, lambda: _finish(paths, job.job, exit_code, config, disk_full))
    return JobSummary(
        run_dir=paths.run_dir, job=job.job, evaluations=sum(s.evaluations for s in gathered),
        wall_seconds=wall, objective_seconds=sum(s.objective_seconds for s in gathered),
        first_evaluation_seconds=min((s.first_evaluation for s in gathered if s.evaluations),
                                     default=start) - t0,
        results_file=results, exit_code=exit_code, disk_full=disk_full)


def _refuse_if_taken_over(comm: MPI.Comm, paths: record.RunPaths,
                          held: Sequence[Claim]) -> None:
    """End a job whose claim another job took over (collective): its rows are in its own
    worker files, but its end would write run.h5 and results.h5 beside the other job."""
    holder = comm.bcast(next((c.lost_to for c in held if c.lost_to), ""), root=0)
    if holder:
        raise RecordError(
            f"{paths.run_dir}: another job ({holder}) took over this run directory while this "
            f"job ran (its claim looked gone: unrefreshed for {STALE_AFTER:g} s, or deleted); "
            "this job stopped, its evaluations are kept, and the run goes on in the other job")


def _begin(paths: record.RunPaths, plan: JobPlan, hosts: list[str], start: float,
           objective: Objective) -> JobPlan:
    """The first write of a job: create the run if new (or record its new budget), then add
    this job.

    An objective may name the metric views show beside the loss in a ``main_metric``
    attribute (the classifier: ``val_accuracy``)."""
    if plan.resumed:
        record.check_room(paths, plan.layout.workers)
        if plan.new_budget:
            record.set_budget(paths, plan.budget)
    else:
        record.create_run(paths, config_table=config_to_dict(plan.config),
                          config_text=plan.config_text, space=plan.config.space,
                          budget=plan.budget, run_id=plan.run_id,
                          main_metric=str(getattr(objective, "main_metric", "")))
    job = record.begin_job(paths, layout=plan.layout.as_dict(), hosts=hosts,
                           versions=record.software_versions(), slurm=record.slurm_ids(),
                           start=start)
    return plan.begun(job)


def _prepare_worker(plan: JobPlan, paths: record.RunPaths, topo: Topology,
                    objective: Objective, stop: StopFlag) -> Leader | Follower:
    """Everything a rank sets up before the search (restore, log files, operators): its role,
    which closes what was set up when it ends."""
    config, job = plan.config, plan.job
    codec = Codec(config.space)
    link = WorkerLink(topo.worker_comm, codec)
    # Read earlier jobs before this job's files exist, so no file is open twice in a process.
    population = on_all(topo.world, lambda: _restored(plan, paths, topo)
                        if topo.is_leader else None)
    rule = on_all(topo.world, lambda: _pruning_rule(plan, paths, topo)
                  if topo.is_leader and config.pruning.active else None)
    log_file = on_all(topo.world, lambda: record.WorkerLog(
        paths.worker_file(job, topo.worker), config.space, job=job, worker=topo.worker,
        flush_interval=config.record.flush_interval, run_id=plan.run_id)
        if topo.is_leader else None)
    keeper = TopWeights(paths, config.record.top_models) if topo.is_leader else None
    evaluator = WorkerEvaluator.for_job(
        config, objective, topo.worker_comm, local_rank=topo.local_rank,
        record_epoch=log_file.add_epoch if log_file is not None else None,
        offer_weights=keeper.offer if keeper is not None else None,
        # the same answer on every rank of the worker (one small allreduce per epoch)
        should_stop=lambda: stop.agreed(topo.worker_comm),
        judge_epoch=_judge(rule, config.pruning.metric, topo.worker_comm)
        if config.pruning.active else None)
    if not topo.is_leader:
        return Follower(link, evaluator)
    assert topo.leaders is not None and log_file is not None

    if rule is not None:
        learn_from_peers = _peer_curves(rule, paths, job, topo, config.pruning.metric,
                                        every=max(config.record.flush_interval, 1.0))

    def hand_out_and_evaluate(ind: Individual) -> None:
        link.hand_out(ind)
        evaluator(ind)
        if rule is not None:
            rule.finish(ind.id, completed=ind.status == Status.OK)
            learn_from_peers()

    loop = IslandLoop(
        layout=topo.layout, worker=topo.worker, mailbox=MpiMailbox(topo.leaders, codec),
        propagator=island_propagator(config.space, topo.layout.island_of_worker(topo.worker),
                                     len(topo.island_workers), config.evolution),
        evaluate=hand_out_and_evaluate, recorder=log_file, migration=config.migration,
        rng=breeding_rng(config.seed, job, topo.worker), id_base=plan.next_id,
        population=population)
    return Leader(loop, link, log_file, evaluator)


def _pruning_rule(plan: JobPlan, paths: record.RunPaths, topo: Topology) -> MedianRule:
    """The worker's pruning rule; on resume it has learned the curves of the completed
    individuals its island recorded in earlier jobs (read before this job's files exist)."""
    rule = MedianRule(plan.config.pruning)
    if not plan.resumed:
        return rule
    run = record.open_run(paths.run_dir)
    metric, ind, epochs = plan.config.pruning.metric, run.individuals, run.epochs
    island = topo.layout.island_of_worker(topo.worker)
    done = ind["id"][(ind["status"] == int(Status.OK))
                     & (ind["island"] % topo.layout.islands == island)]
    if metric not in (epochs.dtype.names or ()):
        return rule
    rows = epochs[np.isin(epochs["individual"], done)]
    for ident in np.unique(rows["individual"]):
        mine = rows[rows["individual"] == ident]
        rule.learn_curve(zip(mine["epoch"].tolist(), mine[metric].tolist(), strict=True))
    return rule


def _peer_curves(rule: MedianRule, paths: record.RunPaths, job: int, topo: Topology,
                 metric: str, every: float) -> Callable[[], None]:
    """The curves the island's other workers complete in this job, read from their worker
    files at most every ``every`` seconds (they flush no more often): the rule then compares
    with the whole island, not only with this worker's own evaluations."""
    layout = topo.layout
    island = layout.island_of_worker(topo.worker)
    files = [paths.worker_file(job, w) for w in range(layout.workers)
             if w != topo.worker and layout.island_of_worker(w) == island]
    known: set[int] = set()
    next_read = time.monotonic() + every

    def learn() -> None:
        nonlocal next_read
        now = time.monotonic()
        if not files or now < next_read:
            return
        next_read = now + every
        for path in files:
            if not path.exists():
                continue
            try:
                curves = record.read_curves(path, metric, known)
            except (RecordError, OSError) as exc:  # mid-rebuild for a new column: next time
                log.debug("pruning: %s not read this time (%s)", path, exc)
                continue
            for ident, curve in curves:
                known.add(ident)
                rule.learn_curve(curve)

    return learn


def _judge(rule: MedianRule | None, metric: str, comm: MPI.Comm
           ) -> Callable[[int, int, Mapping[str, float]], bool]:
    """The worker's pruning verdict on every rank: the leader's rule decides and tells the
    others, so that every rank stops at the same epoch boundary."""
    shared = comm.Get_size() > 1

    def judge(individual: int, epoch: int, metrics: Mapping[str, float]) -> bool:
        verdict = rule is not None and rule.observe(individual, epoch,
                                                     metrics.get(metric, math.nan))
        return bool(comm.bcast(verdict, root=0)) if shared else verdict

    return judge


def _preflight(objective: Objective, config: Config) -> None:
    """An objective may check its options and data once before the job begins, through a
    ``preflight(options, data_dir, parameter_names)`` attribute, so that bad input stops the
    job with one line instead of failing every individual."""
    name = config.objective.name
    check = check_preflight(name, objective)
    if check is None:
        return
    try:
        check(config.objective.options, config.objective.data_dir or None, config.space.names)
    except AtollError:
        raise
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001 - bad input
        raise ObjectiveError(f"objective.name: the preflight of {name!r} failed with "
                             f"{described(exc)}") from None


def _restored(plan: JobPlan, paths: record.RunPaths, topo: Topology) -> Population | None:
    if not plan.resumed:
        return None
    individuals, migrations = record.read_history(paths.run_dir, plan.job)
    return restore_population(individuals, migrations, plan.config.space, topo.layout,
                              topo.island)


def _finish(paths: record.RunPaths, job: int, exit_code: int, config: Config,
            disk_full: str) -> tuple[Path | None, int, str]:
    """Rank 0 closes the job: its end in run.h5, results.h5, and the run's top weights.
    Returns results.h5 (None if not written), the job's exit code and where the disk was full.

    run.h5 records the job's end after results.h5 is written: a job killed or failing while
    consolidating stays recorded as running, and a full disk there makes its code
    EXIT_DISK_FULL (never success). A full disk in run.h5 itself leaves the job recorded as
    running, as after a kill.
    """
    results: Path | None = None
    stop = time.time()
    try:
        try:
            results = record.consolidate(paths, ending=(job, stop, exit_code))
        except full.DiskFull as exc:
            exit_code = EXIT_DISK_FULL
            log.warning("results.h5 not written: %s; free some space, then 'atoll resume %s' "
                        "writes it (exit code %d)", exc, paths.run_dir, exit_code)
            disk_full = disk_full or str(exc)
        record.end_job(paths, job, stop=stop, exit_code=exit_code)
    except full.DiskFull as exc:
        return None, EXIT_DISK_FULL, disk_full or str(exc)
    if paths.model_files():
        individuals = record.read_completed(paths.run_dir)
        losses = dict(zip(individuals["id"].tolist(), individuals["loss"].tolist(), strict=True))
        prune_to_top(paths, losses, config.record.top_models)
    return results, exit_code, disk_full


def _results_now(paths: record.RunPaths) -> Path:
    """results.h5 of a run whose budget is spent, written again if it is missing, damaged or
    older than a worker file (the last job met a full disk writing it)."""
    target = paths.results_file
    damage = record.results_problem(paths, "writing it again from the worker files") \
        if paths.worker_files() else ""
    if damage:
        log.warning("%s", damage)
    if damage or not target.exists() or any(w.stat().st_mtime_ns > target.stat().st_mtime_ns
                                            for w in paths.worker_files()):
        record.consolidate(paths)
    return target


def _hostname() -> str:
    from mpi4py import MPI

    return MPI.Get_processor_name()
