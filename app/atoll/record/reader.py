"""Reading a run back: numpy structured arrays, pandas frames when pandas is there.

A run is read from its worker files (the checkpoint, complete up to each writer's last flush)
and ``run.h5``; if the worker files are gone, from ``results.h5``. Files are opened without
HDF5 file locking, so a run can be inspected while it is being written.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

from atoll.errors import AtollError, RecordError, suggested
from atoll.individual import FINISHED, Status
from atoll.record._h5 import (
    RESULTS_KIND,
    RUN_KIND,
    WORKER_KIND,
    attr,
    count_attr,
    decoded,
    file_kind,
    foreign_file,
    json_attr,
    open_h5,
    run_id_of,
    text,
)
from atoll.record.commits import DAMAGED_HINT, committed, repeated
from atoll.record.paths import RESULTS_FILE, RUN_FILE, RunPaths, is_worker_file
from atoll.record.run import missing_workers
from atoll.record.schema import (
    EPOCH_COLUMNS,
    NEW_EPOCHS,
    epoch_dtype,
    individual_dtype,
    job_dtype,
    migration_dtype,
    part_dtype,
    read_individual_dtype,
)
from atoll.space import Space

if TYPE_CHECKING:
    import pandas

TABLES = ("individuals", "epochs", "migrations", "jobs", "parts")
LATER_TABLES = ("parts",)
"""Tables a results.h5 written by an earlier Atoll may lack (read as empty)."""


@dataclass(frozen=True)
class RunData:
    """Everything a run recorded. Strings are ``str``; enum columns (status, origin, mode) are
    small integers whose names ``h5py.check_enum_dtype(a.dtype["status"])`` gives."""

    individuals: np.ndarray
    epochs: np.ndarray
    migrations: np.ndarray
    jobs: np.ndarray
    space: Space
    config_table: dict[str, Any]
    metadata: dict[str, Any]
    parts: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=part_dtype()))
    """The earlier parts of evaluations done in several (paused, or interrupted, then
    continued); ``individuals`` has each one's last part, and its ``eval_seconds`` sums them
    all."""

    def frame(self, name: str) -> pandas.DataFrame:
        """Table ``name`` as a pandas DataFrame, enum columns as their names."""
        if name not in TABLES:
            raise ValueError(f"table: expected one of {', '.join(TABLES)}, got {name!r}")
        try:
            import pandas as pd
        except ImportError:
            raise RecordError("RunData.frame needs pandas, which is not installed; install it "
                              "(pip install pandas) or use the numpy arrays, e.g. "
                              f"run.{name}") from None
        table: np.ndarray = getattr(self, name)
        columns: dict[str, Any] = {}
        for column in table.dtype.names or ():
            enum = h5py.check_enum_dtype(table.dtype[column])
            if enum:
                names = {value: key for key, value in enum.items()}
                columns[column] = [names.get(int(v), str(v)) for v in table[column]]
            else:
                columns[column] = table[column]
        return pd.DataFrame(columns)


def open_run(run_dir: str | Path) -> RunData:
    """Read a run directory (or a ``results.h5`` file given directly)."""
    path = Path(run_dir)
    if not path.exists():
        raise RecordError(f"{path}: no such file or directory; give the directory of an Atoll "
                          "run (or its results.h5)")
    if path.is_file():
        _check_results_given(path)
        return _read_results(path)
    paths = RunPaths(path)
    for entry in (paths.run_file, paths.results_file):
        if entry.exists() and not entry.is_file():
            raise RecordError(f"{entry}: is {file_kind(entry)}, not an HDF5 file; restore it "
                              "from a backup")
    workers = paths.worker_files()
    if not workers and paths.results_file.is_file():
        return _read_results(paths.results_file)
    if not paths.run_file.is_file() and not workers:
        raise RecordError(f"{path}: not an Atoll run (no run.h5, worker files or results.h5)")
    space, config_table, meta, jobs = _read_run_file(paths, workers)
    parts = [_read_worker(p) for p in workers]
    # A worker file of another run (copied in by hand) would mix its rows into this one.
    expected = meta.get("run_id", "") if paths.run_file.is_file() else parts[0][4]
    for worker_file, part in zip(workers, parts, strict=True):
        if part[4] != expected:
            raise foreign_file(worker_file, part[4], expected)
    _check_unique_ids(workers, [p[0] for p in parts])
    metrics = _union((p[1].dtype.names or ())[len(EPOCH_COLUMNS):] for p in parts)
    meta.update(source="workers", worker_files=[str(p) for p in workers],
                unclosed_worker_files=[str(p) for p, part in zip(workers, parts, strict=True)
                                       if not part[3]])
    damage = results_problem(paths)
    missing = missing_workers(paths, jobs)
    if damage or missing:
        meta["warning"] = "; ".join(filter(None, (meta.get("warning"), damage, missing)))
    last, earlier = split_parts(_concat([p[0] for p in parts], read_individual_dtype(space)))
    return RunData(
        individuals=with_eval_seconds(last, earlier),
        epochs=_merged(_concat([p[1] for p in parts], epoch_dtype(metrics))),
        migrations=_by(_concat([p[2] for p in parts], migration_dtype()), "time"),
        jobs=jobs, space=space, config_table=config_table, metadata=meta,
        parts=as_parts(earlier))


def read_completed(run_dir: str | Path) -> np.ndarray:
    """Only the individuals table, sorted by id: the fast path for a resume."""
    paths = RunPaths(run_dir)
    workers = paths.worker_files()
    if not workers and paths.results_file.is_file():
        with open_h5(paths.results_file, hint=_hint(paths.results_file), kind=RESULTS_KIND) as f:
            return _by(decoded(committed(f["individuals"])), "id")
    space = _read_run_file(paths, workers)[0]
    tables = []
    for path in workers:
        with open_h5(path, hint=_hint(path), kind=WORKER_KIND) as f:
            tables.append(committed(f["individuals"]))
    _check_unique_ids(workers, tables)
    return last_parts(_concat(tables, individual_dtype(space)))


def read_history(run_dir: str | Path, before_job: int) -> tuple[np.ndarray, np.ndarray]:
    """Individuals and migrations of the jobs before ``before_job``: what a resume replays.

    Only earlier jobs' files are opened, so the files this job is writing are never touched.
    """
    paths = RunPaths(run_dir)
    workers = paths.worker_files(before_job)
    space = _read_run_file(paths, workers)[0]
    individuals, migrations = [], []
    for path in workers:
        with open_h5(path, hint=_hint(path), kind=WORKER_KIND) as f:
            individuals.append(committed(f["individuals"]))
            migrations.append(committed(f["migrations"]))
    _check_unique_ids(workers, individuals)
    return (_concat(individuals, individual_dtype(space)),
            _concat(migrations, migration_dtype()))


def _check_unique_ids(files: list[Path], tables: list[np.ndarray]) -> None:
    """An id finished in two worker files, or interrupted after it finished: one of them is
    damaged, or a copy of the other's rows. (An evaluation continued by later jobs has an
    interrupted row in each earlier job's file, then its last part; a paused one promoted
    later has a paused row per rung it waited at, in any worker's file of the same job.)"""
    finished = [t["id"][np.isin(t["status"], FINISHED)] for t in tables]
    twice = repeated(np.concatenate(finished)) if finished else None
    if twice is None:
        done: set[int] = set()
        for held, table in zip(finished, tables, strict=True):
            late = done & set(table["id"][table["status"] == int(Status.INTERRUPTED)].tolist())
            if late:
                twice = min(late)
                break
            done.update(held.tolist())
    if twice is None:
        return
    first, second = [p for p, table in zip(files, tables, strict=True)
                     if twice in table["id"]][:2]
    raise RecordError(f"{second}: individual id {twice} is recorded in {first.name} too: one "
                      f"of the two files is damaged or a copy; {DAMAGED_HINT}")


def results_problem(paths: RunPaths, hint: str = "") -> str:
    """What is wrong with the run's results.h5 ending with ``hint``, '' if it is missing or
    whole. It is a copy of the worker files, made at each job's end: a damaged one is said and
    written again (by ``atoll resume``), never read in their place while they are there."""
    if not paths.results_file.exists():
        return ""
    try:
        _read_results(paths.results_file, hint=hint or f"'atoll resume {paths.run_dir}' writes "
                                                       "it again from the worker files")
    except RecordError as exc:
        return str(exc)
    return ""


def _check_results_given(path: Path) -> None:
    """A file given instead of a run directory: its results.h5, or one line saying what to
    give instead (a run's own file, or no Atoll file at all, is no damage to restore)."""
    worker_file = is_worker_file(path)
    if path.name == RUN_FILE or worker_file:
        run_dir = path.parent.parent if worker_file else path.parent
        raise RecordError(f"{path}: is one of a run's files; give the run's directory "
                          f"({run_dir})")
    if path.name != RESULTS_FILE and not h5py.is_hdf5(path):
        raise RecordError(f"{path}: not an Atoll run (not an HDF5 file); give the directory "
                          "of an Atoll run (or its results.h5)")


def _hint(path: Path) -> str:
    return f"move it out of {path.parent} to read the rest of the run"


def _results_hint(path: Path) -> str:
    """results.h5 is a copy made from the worker files; where they are, read those instead."""
    if RunPaths(path.parent).worker_files():
        return ("read the run from its worker files instead: "
                f"{suggested('atoll', 'inspect', path.parent)}")
    return "no worker files are beside it to read the run from; restore it from a backup"


def _read_run_file(paths: RunPaths, workers: list[Path]
                   ) -> tuple[Space, dict[str, Any], dict[str, Any], np.ndarray]:
    """Space, config table, metadata and jobs; the space from a worker file if run.h5 is gone."""
    meta: dict[str, Any] = {"run_dir": str(paths.run_dir)}
    if paths.run_file.is_file():
        with open_h5(paths.run_file, hint="restore it from a backup", kind=RUN_KIND) as f:
            stored = json_attr(f, "space", paths.run_file)
            config_table = json_attr(f, "config_json", paths.run_file)
            meta.update(_root_attrs(f))
            jobs = _table(f, "jobs", paths.run_file, "restore it from a backup")
        return _space(stored, paths.run_file), config_table, meta, jobs
    with open_h5(workers[0], hint=_hint(workers[0]), kind=WORKER_KIND) as f:
        stored = json_attr(f, "space", workers[0])
    meta["warning"] = "run.h5 is missing: no config and no jobs"
    return _space(stored, workers[0]), {}, meta, np.empty(0, dtype=job_dtype())


def _read_worker(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool, str]:
    with open_h5(path, hint=_hint(path), kind=WORKER_KIND) as f:
        try:
            epochs = f["epochs"] if "epochs" in f else f[NEW_EPOCHS]
            return (committed(f["individuals"]), committed(epochs),
                    committed(f["migrations"]), bool(f.attrs.get("closed", False)),
                    run_id_of(f))
        except (KeyError, OSError, RuntimeError) as exc:
            raise RecordError(f"{path}: damaged ({exc}); {_hint(path)}") from exc


def _read_results(path: Path, hint: str = "") -> RunData:
    hint = hint or _results_hint(path)
    with open_h5(path, hint=hint, kind=RESULTS_KIND) as f:
        stored = json_attr(f, "space", path)
        config_table = json_attr(f, "config_json", path)
        meta = {"run_dir": str(path.parent), "source": "results", **_root_attrs(f)}
        tables = {name: _table(f, name, path, hint) for name in TABLES
                  if name in f or name not in LATER_TABLES}
    space = _space(stored, path)
    if "eval_seconds" not in (tables["individuals"].dtype.names or ()):  # an earlier Atoll's
        tables["individuals"] = with_eval_seconds(
            _concat([tables["individuals"]], read_individual_dtype(space)),
            np.empty(0, dtype=read_individual_dtype(space)))
    return RunData(**tables, space=space, config_table=config_table, metadata=meta)


def _table(f: h5py.File, name: str, path: Path, hint: str) -> np.ndarray:
    """A whole table's committed rows; a missing or unreadable one is damage, said in one line."""
    try:
        return decoded(committed(f[name]))
    except RecordError as exc:  # committed() ends with what to do with a worker file
        text = str(exc)
        if not text.endswith(DAMAGED_HINT):
            raise
        raise RecordError(text.removesuffix(DAMAGED_HINT) + hint) from exc
    except (KeyError, OSError, RuntimeError, ValueError, TypeError) as exc:
        raise RecordError(f"{path}: damaged {name} table ({exc}); {hint}") from exc


def _root_attrs(f: h5py.File) -> dict[str, Any]:
    keep = ("schema_version", "atoll_version", "created", "config", "versions", "consolidated",
            "main_metric", "run_id")
    out: dict[str, Any] = {"budget": count_attr(f, "budget", Path(f.filename))}
    for key in keep:
        value = attr(f, key, Path(f.filename))
        if value is not None:
            out[key] = text(value) if isinstance(value, (str, bytes)) else value.item()
    return out


def _space(stored: Any, path: Path) -> Space:
    try:
        return Space.from_dict(stored)
    except AtollError as exc:
        raise RecordError(f"{path}: the stored search space is invalid ({exc})") from exc


def _union(names: Iterable[Iterable[str]]) -> list[str]:
    seen: dict[str, None] = {}
    for group in names:
        seen.update(dict.fromkeys(group))
    return list(seen)


def _concat(tables: list[np.ndarray], dtype: np.dtype) -> np.ndarray:
    """Rows of every table under ``dtype``, matched by column name; missing columns filled
    (NaN for floats, -1 for integers, "" for strings); strings decoded to ``str``."""
    out = np.empty(sum(len(t) for t in tables), dtype=dtype)
    start = 0
    for table in tables:
        stop = start + len(table)
        present = set(table.dtype.names or ())
        for name in dtype.names or ():
            out[name][start:stop] = table[name] if name in present else _missing(dtype[name])
        start = stop
    return decoded(out)


def _missing(dtype: np.dtype) -> Any:
    if dtype.kind == "f":
        return np.nan
    if dtype.kind in "iu":
        return -1
    if dtype.kind == "b":
        return False
    return ""


def _latest(table: np.ndarray, *keys: str) -> np.ndarray:
    """Sorted by ``keys``, one row per key: the last recorded. An evaluation continued by a
    later job has a row per part (each interrupted one, then its last) in the order of the
    jobs' files; an epoch it trained again is recorded again."""
    table = _by(table, *keys)
    if len(table) < 2:
        return table
    same = np.ones(len(table) - 1, dtype=bool)
    for key in keys:
        same &= table[key][1:] == table[key][:-1]
    return table[np.append(~same, True)]


def _merged(epochs: np.ndarray) -> np.ndarray:
    """One row per individual and epoch, sorted; each metric its last value recorded for that
    epoch. An objective may report one epoch's metrics in several calls (``train_loss``, then
    ``val_loss``), and a continued evaluation reports an epoch it trained again anew."""
    ordered = _by(epochs, "individual", "epoch")
    out = _latest(ordered, "individual", "epoch")
    if len(out) == len(ordered):
        return out
    starts = np.ones(len(ordered), dtype=bool)
    starts[1:] = (ordered["individual"][1:] != ordered["individual"][:-1]) | (
        ordered["epoch"][1:] != ordered["epoch"][:-1])
    group = np.cumsum(starts) - 1  # the row of ``out`` each row of ``ordered`` belongs to
    for name in (ordered.dtype.names or ())[len(EPOCH_COLUMNS):]:
        values = ordered[name]
        last = np.full(len(out), -1)
        np.maximum.at(last, group, np.where(np.isnan(values), -1, np.arange(len(values))))
        out[name] = np.where(last >= 0, values[last], np.nan)
    return out


def last_parts(individuals: np.ndarray) -> np.ndarray:
    """Sorted by id, one row per individual: its finished part if it has one, else the part
    started last. A paused individual promoted in the same job may have its parts in several
    worker files, whose order says nothing of theirs."""
    return split_parts(individuals)[0]


def split_parts(individuals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(:func:`last_parts`, the other parts: each an earlier part of an evaluation done in
    several, sorted by id and start)."""
    if len(individuals) < 2:
        return individuals, individuals[:0]
    finished = np.isin(individuals["status"], FINISHED)
    ordered = _by(individuals[np.lexsort((individuals["started"], finished))], "id")
    last = np.append(ordered["id"][1:] != ordered["id"][:-1], True)
    return ordered[last], ordered[~last]


def with_eval_seconds(last: np.ndarray, earlier: np.ndarray) -> np.ndarray:
    """``last`` (one row per individual, by id) with ``eval_seconds``: its part's time plus
    the ``earlier`` parts' of the same individual."""
    total = _seconds(last)
    np.add.at(total, np.searchsorted(last["id"], earlier["id"]), _seconds(earlier))
    last = last.copy()
    last["eval_seconds"] = total
    return last


def as_parts(rows: np.ndarray) -> np.ndarray:
    """Individuals' rows as rows of the parts table."""
    out = np.empty(len(rows), dtype=part_dtype())
    out["individual"] = rows["id"]
    for name in ("worker", "status", "started", "finished"):
        out[name] = rows[name]
    return out


def _seconds(rows: np.ndarray) -> np.ndarray:
    return np.nan_to_num(rows["finished"] - rows["started"], nan=0.0, posinf=0.0, neginf=0.0)


def _by(table: np.ndarray, *keys: str) -> np.ndarray:
    """Sorted by ``keys`` (first key most significant), stable."""
    if len(table) < 2:
        return table
    order = np.lexsort(tuple(table[k] for k in reversed(keys)))
    return table[order]
