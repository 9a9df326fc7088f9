"""The run file ``run.h5``: config, search space and jobs; written by world rank 0 only.

``check_run`` validates a run directory before a resume and never writes: every problem is a
:class:`~atoll.errors.RecordError` and leaves the directory exactly as it was.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import h5py
import numpy as np

from atoll.errors import AtollError, RecordError, suggested
from atoll.record import full
from atoll.record._h5 import (
    RUN_KIND,
    WORKER_KIND,
    count_attr,
    decoded,
    foreign_file,
    json_attr,
    open_h5,
    run_id_of,
    text,
    to_json,
    write_error,
    write_header,
    written_whole,
)
from atoll.record.claim import CLAIM_FILE
from atoll.record.commits import committed, committed_rows, seal
from atoll.record.paths import RunPaths
from atoll.record.schema import NEW_EPOCHS, check_param_names, create_table, job_dtype, put_attr
from atoll.space import Space

log = logging.getLogger(__name__)

T = TypeVar("T")
_LEFTOVERS = {".run.h5.tmp", CLAIM_FILE}  # what a killed create_run may leave; this job's claim
_RUN_HINT = "restore it from a backup, or start a new run directory"


@dataclass(frozen=True)
class RunInfo:
    """What a job needs to know about an existing run before it continues it."""

    config_table: dict[str, Any]
    space: Space
    jobs: np.ndarray
    """The jobs table: job, start, stop, exit_code, hosts, layout, versions, slurm (JSON)."""
    budget: int
    """Evaluations the whole run completes, fixed when the run was created."""
    run_id: str = ""
    """Written into every file of the run, so that a file of another run is refused."""
    config_dir: str = ""
    """Where the first job's config file was: a ``module:function`` objective beside it is
    found there on resume too."""


def create_run(paths: RunPaths, *, config_table: Mapping[str, Any], config_text: str,
               space: Space, budget: int, run_id: str, main_metric: str = "",
               config_dir: str = "") -> None:
    """Start a new run: make the directory if needed and write ``run.h5``.

    ``main_metric`` is the reported metric views show beside the loss (the objective's
    choice, e.g. ``val_accuracy``; empty: the views pick one)."""
    check_new_run_dir(paths)
    check_param_names(space)
    run_dir = paths.run_dir
    made = not run_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        with written_whole(paths.run_file) as temp:
            # v108 stores attributes over 64 KiB (a long config); HDF5 1.8 and later read it.
            with h5py.File(temp, "w", libver=("v108", "latest")) as f:
                write_header(f, RUN_KIND, created=time.time(), config=config_text,
                             config_json=to_json(dict(config_table)),
                             space=to_json(space.to_dict()), budget=budget,
                             main_metric=main_metric, run_id=run_id, config_dir=config_dir)
                create_table(f, "jobs", job_dtype())
        paths.workers_dir.mkdir(exist_ok=True)
    except OSError as exc:  # read-only, full, no permission: leave nothing behind
        for made_dir in (paths.workers_dir, run_dir) if made else ():
            with contextlib.suppress(OSError):
                made_dir.rmdir()  # only if empty: never removes anything it did not make
        raise write_error(run_dir, exc) from exc


def check_new_run_dir(paths: RunPaths) -> None:
    """Refuse a run directory that is a file, holds a run, or holds anything else; read only."""
    run_dir = paths.run_dir
    _refuse_dangling(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise RecordError(f"{run_dir}: is a file, not a directory; choose an empty or new "
                          "directory for the run")
    if paths.run_file.exists():
        raise RecordError(f"{run_dir}: holds an Atoll run already; use "
                          f"{suggested('atoll', 'resume', run_dir)} "
                          "to continue it, or choose a new directory")
    if run_dir.is_dir():
        foreign = sorted(e.name for e in run_dir.iterdir() if not _tolerated(e, paths))
        if foreign:
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise RecordError(f"{run_dir}: not empty and not an Atoll run (it holds {shown}); "
                              "choose an empty or new directory")


def _refuse_dangling(run_dir: Path) -> None:
    """A symbolic link to nothing (a scratch area that was purged): say so, not "File exists"."""
    if run_dir.is_symlink() and not run_dir.exists():
        raise RecordError(f"{run_dir}: is a symbolic link to {os.readlink(run_dir)}, which does "
                          "not exist; create that directory or remove the link")


def _tolerated(entry: Path, paths: RunPaths) -> bool:
    if entry.name in _LEFTOVERS or entry.name.startswith(f"{CLAIM_FILE}."):
        return True
    return entry == paths.workers_dir and entry.is_dir() and not any(entry.iterdir())


def check_run(paths: RunPaths, space: Space | None = None) -> RunInfo:
    """Validate a run directory for a resume; read only."""
    run_dir = paths.run_dir
    _refuse_dangling(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise RecordError(f"{run_dir}: is a file, not a directory; give the directory of an "
                          "Atoll run")
    if not run_dir.is_dir():
        raise RecordError(f"{run_dir}: no such directory; give the directory of an Atoll run")
    if not paths.run_file.exists():
        if paths.worker_files() or paths.results_file.exists():
            raise RecordError(f"{paths.run_file}: not found, but the run's other files are "
                              "there; restore run.h5 from a backup to resume the run ('atoll "
                              "inspect' and 'atoll report' read it without run.h5)")
        raise RecordError(f"{run_dir}: not an Atoll run (no run.h5 in it); give the directory "
                          "of an Atoll run, or use 'atoll search' to start a new one")
    with open_h5(paths.run_file, hint=_RUN_HINT, kind=RUN_KIND) as f:
        stored = json_attr(f, "space", paths.run_file)
        config_table = json_attr(f, "config_json", paths.run_file)
        budget = count_attr(f, "budget", paths.run_file)
        run_id = run_id_of(f)
        config_dir = text(f.attrs.get("config_dir", ""))
        try:
            jobs = decoded(committed(f["jobs"]))
        except (KeyError, OSError, RuntimeError) as exc:
            raise RecordError(f"{paths.run_file}: damaged jobs table ({exc}); {_RUN_HINT}") \
                from exc
    try:
        run_space = Space.from_dict(stored)
    except AtollError as exc:
        raise RecordError(f"{paths.run_file}: the stored search space is invalid ({exc}); "
                          f"{_RUN_HINT}") from exc
    if space is not None:
        diff = space_difference(stored, space)
        if diff:
            raise RecordError(f"{run_dir}: the search space differs from the run's: {diff}; "
                              "resume with the run's space or start a new run directory")
    for path in paths.worker_files():
        _check_worker(path, stored, run_id)
    _check_kept_dirs(paths)
    missing = missing_workers(paths, jobs)
    if missing:
        log.warning("%s", missing)
    return RunInfo(config_table, run_space, jobs, budget, run_id, config_dir)


def missing_workers(paths: RunPaths, jobs: np.ndarray) -> str:
    """"" or one line naming the worker files that run.h5's ``jobs`` had and that are not
    there (lost in a copy, moved away): their rows are not read. A job that never ended and
    has none of its files was most likely killed in the moment between its start and their
    creation: that is said apart, as what it most likely is."""
    missing, unmade = [], []
    for job, layout, stop in zip(jobs["job"].tolist(), jobs["layout"].tolist(),
                                 jobs["stop"].tolist(), strict=True):
        try:
            workers = int(json.loads(layout)["workers"])
        except (ValueError, KeyError, TypeError):  # an older or damaged layout: no count
            continue
        gone = [path for path in (paths.worker_file(job, w) for w in range(workers))
                if not path.exists()]
        if gone and len(gone) == workers and math.isnan(stop):
            unmade.append(job)
        else:
            missing += gone
    said = []
    if missing:
        said.append(f"{len(missing)} worker file(s) of the run's jobs are missing "
                    f"({missing[0]}, for one): their rows, if any, are not in the record; "
                    "restore them from a backup")
    if unmade:
        said.append(f"job(s) {', '.join(map(str, unmade))} never ended and have none of their "
                    "worker files: killed before they made them, they recorded nothing (or "
                    "starting now; if their files were moved away, restore them to "
                    f"{paths.workers_dir})")
    return "; ".join(said)


def _check_kept_dirs(paths: RunPaths) -> None:
    """The folders a job writes into, where they exist: directories it may write (a file in
    their place, or a read-only one, would fail the job midway, with its start recorded)."""
    kept = ((paths.workers_dir, "worker files"), (paths.checkpoints_dir, "checkpoints"),
            (paths.logs_dir, "logs"), (paths.models_dir, "kept model weights"),
            (paths.work_root, "commands' working directories"))
    for folder, what in kept:
        if not (folder.exists() or folder.is_symlink()):
            continue
        if not folder.is_dir():
            raise RecordError(f"{folder}: is not a directory, but the run keeps its {what} "
                              "there; move it out of the run directory")
        if not os.access(folder, os.W_OK | os.X_OK):
            code = errno.EROFS if os.statvfs(folder).f_flag & os.ST_RDONLY else errno.EACCES
            raise write_error(folder, OSError(code, os.strerror(code)))
    if paths.results_file.is_dir():
        raise RecordError(f"{paths.results_file}: is a directory, but the run writes its "
                          "results there; move it out of the run directory")


def _check_worker(path: Path, stored_space: Any, run_id: str) -> None:
    """Open a worker file as a resume will: readable, locked by no one, of this run and space."""
    hint = f"move it out of {path.parent} to resume without its rows"
    with open_h5(path, hint=hint, kind=WORKER_KIND) as f:
        if run_id_of(f) != run_id:
            raise foreign_file(path, run_id_of(f), run_id)
        try:
            worker_space = json_attr(f, "space", path)
            ds = f["individuals"]
            ds.fields("id")[:committed_rows(ds)]
            if "epochs" not in f and NEW_EPOCHS not in f:
                raise KeyError("no epochs table")
            committed_rows(f["migrations"])
        except RecordError:
            raise
        except Exception as exc:
            raise RecordError(f"{path}: damaged ({exc}); {hint}") from exc
    if worker_space != stored_space:
        diff = _dict_difference(worker_space, stored_space, "in the worker file", "in run.h5")
        raise RecordError(f"{path}: its search space differs from run.h5's: {diff}; {hint}")


def space_difference(stored: Mapping[str, Any], space: Space) -> str | None:
    """The first difference between a stored space and ``space``, or None if they are equal."""
    given = json.loads(to_json(space.to_dict()))
    return _dict_difference(stored, given, "in the run", "in the given space")


def _dict_difference(old: Mapping[str, Any], new: Mapping[str, Any], old_where: str,
                     new_where: str) -> str | None:
    for name in old:
        if name not in new:
            return f"parameter {name!r} is {old_where} but not {new_where}"
    for name in new:
        if name not in old:
            return f"parameter {name!r} is {new_where} but not {old_where}"
    for name, spec in old.items():
        for key in sorted(set(spec) | set(new[name])):
            if spec.get(key) != new[name].get(key):
                return (f"space.{name}.{key} is {spec.get(key)!r} {old_where}, "
                        f"{new[name].get(key)!r} {new_where}")
    return None


def begin_job(paths: RunPaths, *, layout: Mapping[str, Any], hosts: list[str],
              versions: Mapping[str, str], slurm: Mapping[str, str], start: float) -> int:
    """Append a job to the jobs table; return its number (0 for the first job of the run)."""
    def append(f: h5py.File) -> int:
        jobs = decoded(committed(f["jobs"]))
        job = len(jobs)
        row = np.array([(job, start, math.nan, -1, to_json(list(hosts)), to_json(dict(layout)),
                         to_json(dict(versions)), to_json(dict(slurm)))], dtype=job_dtype())
        del f["jobs"]  # written again whole: its text columns as wide as their longest value
        create_table(f, "jobs", job_dtype(), data=np.concatenate([jobs.astype(job_dtype()), row]))
        return job

    return _edit(paths, append)


def end_job(paths: RunPaths, job: int, *, stop: float, exit_code: int) -> None:
    """Record when and how a job ended (a full disk: DiskFull, the job stays running)."""
    def close_row(f: h5py.File) -> None:
        ds = f["jobs"]
        rows = committed_rows(ds)
        if not 0 <= job < rows:
            raise RecordError(f"{paths.run_file}: no job {job} (the run has {rows} jobs)")
        row = ds[job]
        row["stop"] = stop
        row["exit_code"] = exit_code
        ds[job] = row
        seal(ds)

    _edit(paths, close_row)


def set_budget(paths: RunPaths, budget: int) -> None:
    """A resume's new total budget: in the run's budget and in its stored config, so that
    later resumes keep it."""
    def change(f: h5py.File) -> None:
        config_table = json_attr(f, "config_json", paths.run_file)
        config_table.setdefault("search", {})["evaluations"] = budget
        put_attr(f, "config_json", to_json(config_table))
        f.attrs["budget"] = budget

    _edit(paths, change)


def _edit(paths: RunPaths, change: Callable[[h5py.File], T]) -> T:
    """Change run.h5 whole or not at all (a kill at the end of a job is common)."""
    if not paths.run_file.is_file():
        raise RecordError(f"{paths.run_dir}: not an Atoll run (no run.h5 in it)")
    return full.edit_whole(paths.run_file, change, hint=_RUN_HINT, kind=RUN_KIND)
