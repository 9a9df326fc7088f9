"""Planning a job, once, on world rank 0: which search, which budget, which rank layout.

Planning only reads: a run directory that does not fit, a changed search or a layout that
cannot work is an error before anything is written. The plan is then shared with every rank
as it is (a :class:`JobPlan` pickles), so no rank parses the config or plans the layout again.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from atoll import record
from atoll.config import (
    MAX_EVALUATIONS,
    Config,
    apply_overrides,
    config_to_dict,
    parse_config,
    section_default,
)
from atoll.engine.restore import completed_count
from atoll.engine.topology import Layout, plan_layout
from atoll.errors import ConfigError, suggested
from atoll.exit_codes import EXIT_DISK_FULL
from atoll.space import INT64_MAX

log = logging.getLogger(__name__)

JOB_KEYS = ("search.ranks_per_worker", "search.islands", "search.wall_time",
            "record.flush_interval", "search.evaluations", "search.give_up_after")
"""Settings a resume may change: the layout and timing of a job, and the run's total budget
(a larger one extends a run, finished or not)."""


@dataclass(frozen=True)
class JobPlan:
    """What rank 0 decided before any work starts, shared with every rank."""

    config: Config
    layout: Layout
    budget: int  # evaluations the whole run completes
    resumed: bool  # whether the run exists already
    config_text: str = ""  # the config as given, recorded for a new run
    done: int = 0  # evaluations completed by earlier jobs
    next_id: int = 0  # first individual id this job may use
    new_budget: bool = False  # a resume changed the run's budget: record it when it begins
    job: int = -1  # set when the job begins in the record
    run_id: str = ""  # in every file of the run (a new one for a new run)

    @property
    def nothing_left(self) -> bool:
        return self.resumed and self.done >= self.budget

    def begun(self, job: int) -> JobPlan:
        return replace(self, job=job)


def budget_spent(run_dir: Path, plan: JobPlan, outcome: str = "no job was started") -> str:
    """What a job says instead of starting on a run whose budget is spent (``atoll doctor``
    warns with the same line, its ``outcome`` told as what a search would do)."""
    extend = suggested("atoll", "resume", run_dir, "--set", "search.evaluations=N")
    if plan.done > plan.budget:  # a budget lowered below what the run holds
        return (f"{run_dir}: the run's budget is spent (it holds {plan.done} evaluations, more "
                f"than the {plan.budget} asked for): {outcome}; to go on, raise it above "
                f"{plan.done} with {extend}")
    return (f"{run_dir}: the run's budget is spent ({plan.done} of {plan.budget} evaluations): "
            f"{outcome}; extend it with {extend}")


def plan_new_or_same(paths: record.RunPaths, config: Config, world_size: int,
                     config_text: str = "") -> JobPlan:
    """``atoll search``: a new run, or the run in ``paths`` if it is the same search (a
    different ``search.evaluations`` then sets the run's new budget)."""
    note_limits(config)
    if paths.run_file.exists():
        info = record.check_run(paths, config.space)
        _same_search(paths, info.config_table, config)
        stored = info.config_table.get("search", {}).get("evaluations", 0)
        changed = config.search.evaluations not in (0, stored)
        return _continue(paths, config, world_size,
                         config.search.evaluations if changed else info.budget, changed, info)
    record.check_record_fits(config.space)
    record.check_new_run_dir(paths)
    layout = job_layout(config, world_size)
    return _with_ids(JobPlan(config, layout, run_budget(config, layout.workers), resumed=False,
                             config_text=config_text, run_id=uuid.uuid4().hex))


def plan_resume(paths: record.RunPaths, overrides: Sequence[str], world_size: int) -> JobPlan:
    """``atoll resume``: the run's own search; ``overrides`` may change only JOB_KEYS."""
    info = record.check_run(paths)
    keys = [item.partition("=")[0].strip() for item in overrides]
    for item, key in zip(overrides, keys, strict=True):
        if key not in JOB_KEYS:
            raise ConfigError(f"--set {item!r}: a resume may change only "
                              f"{', '.join(JOB_KEYS)}; start a new run to change {key}")
    config = parse_config(apply_overrides(info.config_table, overrides))
    config = replace(config, objective=replace(config.objective, config_dir=info.config_dir))
    note_limits(config)
    changed = "search.evaluations" in keys and config.search.evaluations != info.budget
    if changed and config.search.evaluations == 0:
        raise ConfigError("--set search.evaluations=0: a resume needs the run's new total "
                          f"budget (it is {info.budget} now)")
    return _continue(paths, config, world_size,
                     config.search.evaluations if changed else info.budget, changed, info)


def _continue(paths: record.RunPaths, config: Config, world_size: int, budget: int,
              new_budget: bool, info: record.RunInfo) -> JobPlan:
    """The plan of a job that continues a run: what earlier jobs completed, the next id."""
    individuals = record.read_completed(paths.run_dir)
    done = completed_count(individuals)
    recorded = int(individuals["id"].max()) + 1 if len(individuals) else 0
    return _with_ids(JobPlan(config, job_layout(config, world_size), budget, resumed=True,
                             done=done, next_id=max(recorded, ids_taken(info.jobs)),
                             new_budget=new_budget, run_id=info.run_id))


PAUSING_IDS = 1000
"""New ids per evaluation of the budget when evaluations pause (``pruning.rule = "asha"``):
a paused one spends no budget, so a worker breeds more new individuals than it completes: for
each one that completes, up to about ``eta`` to the power of the rungs before its last epoch."""


def id_block(plan: JobPlan) -> list[int]:
    """The ids a job may give new individuals, [first, end): each worker at most the budget
    left to its island (all of it may come to one worker, :mod:`atoll.engine.sharing`;
    ``PAUSING_IDS`` times that when evaluations pause). Recorded with the job, so that no later
    job gives one of them again while this job may still write rows (killed, or its claim
    taken over after a hang); once its end is recorded, the ids it did not give are free again
    (:func:`ids_taken`), so a run's ids stay dense."""
    layout = plan.layout
    shares = share(max(plan.budget - plan.done, 0), layout.workers)
    island_budgets = [0] * layout.islands
    for worker, part in enumerate(shares):
        island_budgets[layout.island_of_worker(worker)] += part
    most = max(island_budgets)
    most *= PAUSING_IDS if plan.config.pruning.pauses else 1
    end = plan.next_id + most * layout.workers
    if end > INT64_MAX:
        raise ConfigError(f"search.evaluations: {most:,} new ids for each of {layout.workers:,} "
                          f"workers would pass the largest id ({INT64_MAX:,}); lower the budget "
                          "or use more islands (a worker may take over its island's budget)")
    return [plan.next_id, end]


def _with_ids(plan: JobPlan) -> JobPlan:
    """``plan``, once its block of new ids is known to fit (refused before anything is
    written)."""
    id_block(plan)
    return plan


def ids_taken(jobs: np.ndarray) -> int:
    """The end of the last id block of an earlier job whose rows may be incomplete: one whose
    end run.h5 does not record (killed, still running, or taken over while alive: it may
    still write rows) or that met a full disk (an evaluation may have left files but no row).
    Any other job that ended wrote all its rows, so the next ids follow its last recorded one
    (0 for jobs recorded before blocks were: their ids are in the record)."""
    open_ended = jobs[~np.isfinite(jobs["stop"]) | (jobs["exit_code"] == EXIT_DISK_FULL)]
    ends = [json.loads(str(layout)).get("ids", [0, 0])[1] for layout in open_ended["layout"]]
    return max(ends, default=0)


def run_budget(config: Config, workers: int) -> int:
    """The evaluations a new run completes: ``search.evaluations`` if set, else generations
    per worker of its first job; capped by ``search.max_evaluations`` if set."""
    search = config.search
    total = search.evaluations or search.generations * workers
    total = min(total, search.max_evaluations) if search.max_evaluations else total
    if total > MAX_EVALUATIONS:
        raise ConfigError(f"search.generations: {search.generations:,} per worker x {workers:,} "
                          f"workers is a budget of {total:,}, more than the {MAX_EVALUATIONS:,} a "
                          "run may have; lower it or set search.evaluations")
    return total


def share(total: int, workers: int) -> list[int]:
    """Split ``total`` evaluations as evenly as possible; the first workers take the rest."""
    return [total // workers + (1 if w < total % workers else 0) for w in range(workers)]


def note_limits(config: Config) -> None:
    """Say it when a setting cannot act everywhere: ``inherit.enabled`` on CMA-ES's candidates,
    sampled without parents, which train from scratch; ``migration.mode = "migration"`` on PBT
    islands, which copy their emigrants instead (``MigrationConfig.for_island``)."""
    islands = config.evolution.island_strategies or (config.evolution.strategy,)
    pbt = [island for island in range(config.search.islands)
           if config.evolution.strategy_of(island) == "pbt"]
    if config.migration.moves and pbt and config.search.islands > 1 \
            and config.migration.probability > 0:
        log.warning("migration.mode = \"migration\": PBT island(s) %s copy their emigrants "
                    "instead of moving them (pollination), so that each member trains on at "
                    "home; set migration.mode = \"pollination\" to say so",
                    ", ".join(map(str, pbt)))
    sampled = sorted({s for s in islands if s in ("cmaes", "hybrid")})
    if config.inherit.enabled and sampled:
        log.warning("inherit.enabled: the candidates CMA-ES samples (evolution strategy %s) "
                    "have no parents and train from scratch; only the GA's children inherit "
                    "(use the strategy \"ga\" or \"pbt\" to inherit everywhere)",
                    " and ".join(repr(s) for s in sampled))


def job_layout(config: Config, world_size: int) -> Layout:
    """This job's layout. More islands than workers are lowered to one island per worker, with
    a warning: a config written for a large allocation still runs on a small one (a laptop, a
    requeue onto fewer nodes); the jobs table records the islands each job had."""
    per_worker, islands = config.search.ranks_per_worker, config.search.islands
    workers = world_size // per_worker
    if world_size % per_worker == 0 and 0 < workers < islands:
        log.warning("search.islands=%d is more than the %d worker(s) of this job (%d rank(s) / %d "
                    "per worker): running %d island(s); start more ranks for more islands",
                    islands, workers, world_size, per_worker, workers)
        islands = workers
    return plan_layout(world_size, per_worker, islands)


def _same_search(paths: record.RunPaths, stored: dict[str, Any], config: Config) -> None:
    """Refuse to continue a run with settings other than the job-level ones changed."""
    given = config_to_dict(config)
    for section, values in given.items():
        old_values = stored.get(section)
        items = values.items() if isinstance(values, dict) else [(None, values)]
        for key, value in items:
            dotted = section if key is None else f"{section}.{key}"
            old = old_values if key is None else (old_values or {}).get(
                key, section_default(section, key))
            if dotted not in JOB_KEYS and section != "space" and old != value:
                raise ConfigError(
                    f"{paths.run_dir}: holds a run with {dotted} = {old!r}, not {value!r}; "
                    f"continue it with {suggested('atoll', 'resume', paths.run_dir)} or use a "
                    "new run directory")
