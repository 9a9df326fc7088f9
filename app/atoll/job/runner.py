"""One job of a search: plan it, begin it in the record, run every rank's role, close it.

Collective over the communicator it is given (``MPI.COMM_WORLD`` from the CLI). Errors the user
can fix are found on rank 0 where possible and shared with every rank (:mod:`atoll.collective`),
so that all ranks stop with the same one-line message instead of some of them hanging.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from atoll import record
from atoll.collective import on_all, on_root
from atoll.config import Config, config_to_dict
from atoll.engine.giving_up import GAVE_UP, FailureWatch
from atoll.engine.island import Budget, IslandLoop, breeding_rng
from atoll.engine.lone_failure import end_every_rank
from atoll.engine.paused import paused_on, paused_rows, to_resume, without_checkpoint
from atoll.engine.population import Population
from atoll.engine.protocol import Codec, MpiMailbox
from atoll.engine.restore import deal, restore_population, to_continue
from atoll.engine.stopping import (
    DISK_FULL,
    StopFlag,
)
from atoll.engine.topology import Topology, build_topology
from atoll.engine.worker import Follower, Leader, WorkerLink
from atoll.evaluation.call import Objective
from atoll.evaluation.evaluator import WorkerEvaluator
from atoll.evolution.default import island_strategy
from atoll.evolution.distinct import Distinct
from atoll.evolution.pbt import PBT
from atoll.evolution.strategy import ContinueFirst, PromoteFirst, Strategy
from atoll.individual import FINISHED, Individual, Status
from atoll.job.ending import exit_code_said, finish_job, refuse_if_taken_over, results_now
from atoll.job.plan import (
    JobPlan,
    budget_spent,
    id_block,
    plan_new_or_same,
    plan_resume,
    share,
)
from atoll.job.preflight import check_torchrun_layout, preflight
from atoll.logs import FILE_ONLY, rank_log
from atoll.objectives.loader import objective_of
from atoll.record import full, holds, promotion
from atoll.record.checkpoints import (
    CheckpointStore,
    Retention,
    discard_finished,
    release_earlier_holds,
)
from atoll.record.claim import CLAIM_LOST, Claim, claim, still_held
from atoll.record.links import holds_files
from atoll.record.models import TopWeights
from atoll.scheduling.worker import WorkerScheduling
from atoll.space import FloatParam

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
    claimed = comm.bcast(held[0].text if held else "", root=0)
    draft = on_root(comm, plan)
    config = draft.config
    if draft.nothing_left:
        return _nothing_to_run(paths, draft, comm)
    objective = on_all(comm, lambda: objective_of(config, paths.run_dir))
    on_root(comm, lambda: preflight(objective, config))
    on_root(comm, lambda: check_torchrun_layout(config, draft.layout, hosts))
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
                role = _prepare_worker(job, paths, topo, objective, stop, claimed)
                comm.Barrier()  # the search (and its wall time) starts together on every rank
                if job.resumed and config.inherits and comm.Get_rank() == 0:
                    # every leader now holds what it wants: the earlier jobs' holds go
                    release_earlier_holds(CheckpointStore(paths, job.run_id), job.job)
                start = time.time()
                try:
                    stats = role.run(budget)
                except BaseException as error:  # noqa: BLE001 - any failure here is the job's
                    if comm.Get_size() == 1:
                        raise
                    end_every_rank(comm, error, paths.run_dir)
        finally:
            stopped = stop.close()
        refuse_if_taken_over(comm, paths, held)
        wall = time.time() - start
        gathered = [s for s in comm.allgather(stats if topo.is_leader else None) if s is not None]
        disk_full = next((m for m in comm.allgather(full.seen()) if m), "")
        gave_up = any(reason == GAVE_UP for reason in comm.allgather(stop.reason))
        # every rank's evaluations started after its own reading (on its host's clock): a
        # rank that read late would miss its partners' first rows
        began = min(comm.allgather(start))
        exit_code = exit_code_said(paths, job, sum(s.completed for s in gathered), disk_full,
                            GAVE_UP if gave_up else stop.reason if stopped else "", began, comm)
        results, exit_code, disk_full = on_root(
            comm, lambda: finish_job(paths, job.job, exit_code, config, disk_full))
    return JobSummary(
        run_dir=paths.run_dir, job=job.job, evaluations=sum(s.evaluations for s in gathered),
        wall_seconds=wall, objective_seconds=sum(s.objective_seconds for s in gathered),
        first_evaluation_seconds=min((s.first_evaluation for s in gathered if s.evaluations),
                                     default=start) - t0,
        results_file=results, exit_code=exit_code, disk_full=disk_full)


def _nothing_to_run(paths: record.RunPaths, plan: JobPlan, comm: MPI.Comm) -> JobSummary:
    """A run whose budget is spent runs no job: it says so, and writes results.h5 if missing."""
    log.warning("%s", budget_spent(paths.run_dir, plan))
    written = on_root(comm, lambda: results_now(paths))
    return JobSummary(run_dir=paths.run_dir, job=-1, evaluations=0, wall_seconds=0.0,
                      objective_seconds=0.0, first_evaluation_seconds=0.0, results_file=written,
                      exit_code=0)


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
                          main_metric=str(getattr(objective, "main_metric", "")),
                          config_dir=plan.config.objective.config_dir)
    job = record.begin_job(paths, layout={**plan.layout.as_dict(), "ids": id_block(plan)},
                           hosts=hosts,
                           versions=record.software_versions(), slurm=record.slurm_ids(),
                           start=start)
    return plan.begun(job)


def _prepare_worker(plan: JobPlan, paths: record.RunPaths, topo: Topology,
                    objective: Objective, stop: StopFlag, claimed: str) -> Leader | Follower:
    """Everything a rank sets up before the search (restore, log files, operators): its role,
    which closes what was set up when it ends."""
    config, job = plan.config, plan.job
    codec = Codec(config.space)
    link = WorkerLink(topo.worker_comm, codec)
    # Every rank reads a checkpoint; the leader alone writes and discards them.
    checkpoints = CheckpointStore(paths, plan.run_id, config.record.checkpoint_limit_mb)
    # Read earlier jobs before this job's files exist, so no file is open twice in a process.
    population, interrupted, paused, succeeded = on_all(
        topo.world, lambda: _restored(plan, paths, topo, checkpoints) if topo.is_leader
        else (None, [], [], False))
    pruning = WorkerScheduling.for_job(plan, paths, topo) if config.pruning.active else None
    log_file = on_all(topo.world, lambda: _worker_log(plan, paths, topo, claimed)
                      if topo.is_leader else None)
    keeper = TopWeights(paths, config.record.top_models) if topo.is_leader else None
    evaluator = WorkerEvaluator.for_job(
        config, objective, topo.worker_comm, node=topo.node,
        record_epoch=log_file.add_epoch if log_file is not None else None,
        offer_weights=keeper.offer if keeper is not None else None,
        # the same answer on every rank of the worker (one small allreduce per epoch)
        should_stop=lambda: stop.agreed(topo.worker_comm),
        judge_epoch=pruning.judge if pruning is not None else None, checkpoints=checkpoints,
        before_checkpoint=log_file.before_checkpoint if log_file is not None else None,
        # the leader's loop, built below, answers its partners at each report: evaluations
        # begin only once it exists
        answer_partners=(lambda: loop.take_in()) if topo.is_leader else None)
    if not topo.is_leader:
        return Follower(link, evaluator)
    assert topo.leaders is not None and log_file is not None and keeper is not None
    keeps_directories = bool(config.objective.command) and config.record.top_models > 0
    promoted: set[int] = set()  # claims on paused individuals, released once the row is in

    def release_promoted(ids: list[int]) -> None:
        for ident in promoted.intersection(ids):
            promoted.discard(ident)
            promotion.release(paths, ident)

    def hand_out_and_evaluate(ind: Individual) -> None:
        link.hand_out(ind)
        evaluator(ind)
        if keeps_directories and ind.status == Status.OK:  # before its directory goes
            keeper.offer_directory(ind.id, ind.loss, paths.command_checkpoint_dir(ind.id))
        if ind.status in FINISHED:  # an interrupted or paused one keeps its checkpoint
            retention.finished(ind)
        if config.pruning.pauses and paths.promotion_claim(ind.id).exists():
            # a kill before its row is in leaves the claim: the next job continues it
            promoted.add(ind.id)
            log_file.write_at_once(ind.id)
        if pruning is not None:
            pruning.finished(ind)

    population = population if population is not None else Population()
    retention = _retention(config, checkpoints, population, job, topo, log_file)
    strategy, hear_started = _strategy(config, paths, topo, pruning, interrupted, paused)
    loop = IslandLoop(
        layout=topo.layout, worker=topo.worker, mailbox=MpiMailbox(topo.leaders, codec),
        strategy=strategy, evaluate=hand_out_and_evaluate, recorder=log_file,
        migration=config.migration.for_island(config.evolution.strategy_of(topo.island)),
        rng=breeding_rng(config.seed, job, topo.worker), id_base=plan.next_id,
        population=population,
        listeners=[FailureWatch(config.search.give_up_after, succeeded, stop.request).learn,
                   retention.learn],
        curves=pruning, holds=retention, hear_started=hear_started)
    log_file.when_written(release_promoted)
    return Leader(loop, link, log_file, evaluator)


def _worker_log(plan: JobPlan, paths: record.RunPaths, topo: Topology,
                claimed: str) -> record.WorkerLog:
    """The worker's log file of this job, which writes nothing once another job has taken the
    run's claim over (its rows must not reach the run)."""
    config = plan.config
    return record.WorkerLog(
        paths.worker_file(plan.job, topo.worker), config.space, job=plan.job,
        worker=topo.worker, flush_interval=config.record.flush_interval, run_id=plan.run_id,
        may_write=lambda: not claimed or still_held(paths.run_dir, claimed))


def _retention(config: Config, checkpoints: CheckpointStore, population: Population, job: int,
               topo: Topology, log_file: record.WorkerLog) -> Retention:
    """Which checkpoints the leader keeps: those children may inherit from, and its
    emigrants' while they travel; it adopts what the restored population holds, and lets a
    finished evaluation's checkpoint go once ``log_file`` has written its row."""
    emigrants = config.migration.migrants if topo.layout.islands > 1 and \
        config.migration.probability > 0 else 0
    retention = Retention(checkpoints, config.inherit.keep if config.inherits else 0,
                          population.ranked, job=job, worker=topo.worker, emigrants=emigrants,
                          pbt=config.evolution.strategy_of(topo.island) == "pbt")
    retention.adopt(population)
    log_file.when_written(retention.written)
    return retention


def _strategy(config: Config, paths: record.RunPaths, topo: Topology,
              pruning: WorkerScheduling | None, interrupted: Sequence[Individual],
              paused: Sequence[Individual]
              ) -> tuple[Strategy, Callable[[Individual], None] | None]:
    """The leader's strategy: its share of the ``interrupted`` evaluations first, then
    (``asha``) promotions of the island's paused individuals, then the island's breeding,
    which breeds again rather than repeat an evaluated candidate unless children inherit
    weights; and what hears the candidates partners begin, where it could repeat one (a space
    with ints or choices) or (PBT) train a member on that a partner trains already."""
    strategy: Strategy = island_strategy(config.space, topo.island,
                                         len(topo.island_workers), config.evolution,
                                         config.inherit, config.pbt, topo.worker,
                                         partial=config.pruning.rungs)
    hear_started = None
    if isinstance(strategy, PBT):
        hear_started = strategy.started  # its members: none is trained on twice at once
        # Members whose children are continued on this island or wait at its rungs: hold
        # them from the start, as no message could come before every partner bred its first.
        # (A child continued on another island lives on there; its member trains on here.)
        continued = deal(interrupted, topo.layout)
        for ind, worker in zip(interrupted, continued, strict=True):
            if topo.layout.island_of_worker(worker) == topo.island:
                strategy.started(ind)
        for ind in paused:  # the island's
            strategy.started(ind)
    if not config.inherits:
        strategy = Distinct(strategy, topo.worker)
        if any(not isinstance(param, FloatParam) for param in config.space.params):
            hear_started = strategy.started  # floats almost never repeat: no message for them
    if pruning is not None and pruning.rungs is not None:
        strategy = PromoteFirst(strategy, pruning.rungs,
                                lambda ident, epoch: promotion.claim(paths, ident, epoch), paused)
    waiting = dealt(interrupted, topo)
    return (ContinueFirst(strategy, waiting) if waiting else strategy), hear_started


def dealt(interrupted: Sequence[Individual], topo: Topology) -> list[Individual]:
    """This worker's share of the interrupted evaluations (:func:`deal`)."""
    workers = deal(interrupted, topo.layout)
    return [ind for ind, worker in zip(interrupted, workers, strict=True)
            if worker == topo.worker]


def _restored(plan: JobPlan, paths: record.RunPaths, topo: Topology,
              checkpoints: CheckpointStore
              ) -> tuple[Population | None, list[Individual], list[Individual], bool]:
    """The island's population, the run's interrupted evaluations (every worker's, in order
    of id), the island's paused individuals, and whether any evaluation of the run
    succeeded."""
    if not plan.resumed:
        return None, [], [], False
    individuals, migrations = record.read_history(paths.run_dir, plan.job)
    recorded = set(individuals["id"].tolist())
    if topo.worker == 0:  # one leader, while no leader of this job holds anything yet
        finished = individuals["id"][np.isin(individuals["status"], FINISHED)].tolist()
        discard_finished(checkpoints, finished)
        for ident in promotion.held(paths).intersection(finished):  # its row came first
            promotion.release(paths, ident)  # a hard link would keep the checkpoint's bytes
        forgotten = holds.forget_unrecorded(paths, recorded)
        if forgotten:
            log.info("the checkpoints of %d evaluation(s) a killed job ended but did not "
                     "record are continued, no longer held as results: %s", len(forgotten),
                     ", ".join(map(str, forgotten)))
        _say_orphaned_scripts(paths, recorded)
    unrecorded = {c.individual: c.about
                  for c in checkpoints.unrecorded(recorded)}
    cut = promotion.held(paths)
    interrupted = to_continue(to_resume(individuals, cut), plan.config.space, unrecorded)
    waiting = dealt(interrupted, topo)
    if topo.worker == 0 and interrupted:  # the console shows rank 0's lines: it says them all
        log.info("continuing %d interrupted evaluation(s), each where it ran if this layout "
                 "has its worker, under their ids: %s", len(interrupted),
                 ", ".join(str(i.id) for i in interrupted))
    if waiting:
        log.info("this worker continues %s", ", ".join(str(i.id) for i in waiting),
                 extra=FILE_ONLY)
    waiting_at_rungs = paused_rows(individuals, cut)
    kept = set(paths.checkpoint_files()) if len(waiting_at_rungs) else set()
    lost = without_checkpoint(waiting_at_rungs, kept)
    if lost:
        log.warning("%d paused individual(s) have no checkpoint any more (%s is gone, for one): "
                    "they cannot be promoted, and stay paused in the record", len(lost),
                    paths.checkpoint_file(lost[0]))
    paused = paused_on(waiting_at_rungs, plan.config.space, topo.layout, topo.island, kept)
    succeeded = bool((individuals["status"] == int(Status.OK)).any())
    lineages = plan.config.evolution.strategy_of(topo.island) == "pbt"
    return restore_population(individuals, migrations, plan.config.space, topo.layout,
                              topo.island, lineages), interrupted, paused, succeeded


def _say_orphaned_scripts(paths: record.RunPaths, recorded: set[int]) -> None:
    """Command objectives' own checkpoints of evaluations a killed job never recorded nor
    saved the small checkpoint of (no epoch line came after the script saved): nothing says
    their parameters, so they cannot be continued; they are left where they are, said once."""
    kept = paths.checkpoint_files()
    orphans = sorted(path for ident, path in paths.command_checkpoint_dirs().items()
                     if ident not in recorded and ident not in kept and holds_files(path))
    if orphans:
        log.warning("%d folder(s) of a command's own checkpoint (%s, for one) belong to "
                    "evaluations a killed job never recorded, and whose parameters Atoll had "
                    "not saved (no 'ATOLL epoch=' line came after the script saved, or no "
                    "room was left for Atoll's checkpoint): they cannot be continued and stay "
                    "as they are; delete them if you do not need them", len(orphans),
                    orphans[0])


def _hostname() -> str:
    from mpi4py import MPI

    return MPI.Get_processor_name()
