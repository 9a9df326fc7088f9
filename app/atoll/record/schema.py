"""The HDF5 schema: table dtypes, column meanings and units, and how a table is created.

Every table is a one-dimensional, chunked, resizable compound dataset. Its attributes say what it
holds: ``description``, and per column ``doc:NAME`` (meaning) and ``unit:NAME`` (where there is
one), so ``h5ls -v`` and ``h5dump -A`` show them. ``rows`` is the number of committed rows: a
writer updates it only after the rows themselves reached the file, so a reader that stops there
never sees a half-written batch, even of a writer killed during a flush. ``checksum`` is (rows
it covers, their CRC-32), raised right after ``rows``: HDF5 checksums its own metadata (the
attributes among it) but not the rows, so without it a changed loss or id went unnoticed.
No text is kept in HDF5's global heap (unchecked, and a damaged header there loops HDF5): text
attributes and the columns of tables written whole are fixed-length (:func:`put_attr`,
:func:`fixed_text`); a worker file's categorical columns are as wide as their longest choice,
its error texts a byte stream its ``checksum`` covers too (:mod:`atoll.record.texts`).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Mapping

import h5py
import numpy as np

from atoll.config import MIGRATION_MODES
from atoll.errors import ConfigError, RecordError
from atoll.individual import FIELDS, Origin, Status
from atoll.record.commits import CHECKSUM_ATTR, ROWS_ATTR, checksum, checksum_value
from atoll.space import CategoricalParam, FloatParam, IntParam, Param, Space

SCHEMA_VERSION = 2
"""Bumped whenever a reader of the old version would misread a new file. 2: worker files keep
their text out of HDF5's global heap (:func:`worker_individual_dtype`); version 1 files are
read as before."""

NEW_EPOCHS = "epochs.new"
"""Where a worker log builds a widened epochs table before it replaces ``epochs``; readers
take ``epochs`` if present, else this."""
STATUS_NAMES = {s.name.lower(): int(s) for s in Status}
ORIGIN_NAMES = {o.name.lower(): int(o) for o in Origin}
MODE_NAMES = {mode: code for code, mode in enumerate(MIGRATION_MODES)}

STR = h5py.string_dtype()
STATUS = h5py.enum_dtype(STATUS_NAMES, basetype="i1")
ORIGIN = h5py.enum_dtype(ORIGIN_NAMES, basetype="i1")
MODE = h5py.enum_dtype(MODE_NAMES, basetype="i1")

_UNIX = "unix seconds"
# column -> (meaning, unit); one entry per fixed column of every table.
COLUMNS: dict[str, dict[str, tuple[str, str]]] = {
    "individuals": {
        "id": ("individual id, unique in the run", ""),
        "island": ("island it was evaluated on", ""),
        "worker": ("worker that evaluated it (global worker index)", ""),
        "generation": ("generation on its island when it was bred", ""),
        "parent_a": ("first parent's id, -1 if none", ""),
        "parent_b": ("second parent's id, -1 if none", ""),
        "inherit_from": ("individual whose checkpoint its training started from, -1 if none", ""),
        "inherit_epoch": ("epoch of that checkpoint, -1 if none", ""),
        "origin": (f"how its parameters were made: {' or '.join(ORIGIN_NAMES)}", ""),
        "status": (f"how its evaluation ended: {', '.join(STATUS_NAMES)}", ""),
        "version": ("number of migrations before it was recorded", ""),
        "born": ("when it was created", _UNIX),
        "started": ("when its evaluation started", _UNIX),
        "finished": ("when its evaluation ended", _UNIX),
        "eval_seconds": ("time its evaluation took, its parts summed: one paused at a rung or "
                         "interrupted by a stop, then continued, has several (the parts table "
                         "has all but its last); read runs and results.h5 only", "s"),
        "loss": ("objective value, lower is better; NaN if none", "objective units"),
        "error": ("error text with traceback for failed evaluations, else empty", ""),
    },
    "epochs": {
        "individual": ("id of the individual", ""),
        "epoch": ("epoch number as reported by the objective", ""),
        "time": ("when the epoch was reported", _UNIX),
    },
    "migrations": {
        "individual": ("id of the individual that moved", ""),
        "version": ("its version after the move", ""),
        "mode": ("migration (moved) or pollination (copied)", ""),
        "from_island": ("island it left", ""),
        "to_island": ("island it reached", ""),
        "from_worker": ("worker that sent it", ""),
        "to_worker": ("worker that received it", ""),
        "time": ("when it was sent", _UNIX),
    },
    "population": {
        "id": ("individual id", ""),
        "version": ("migrations of the copy this worker holds", ""),
        "island": ("island the copy belongs to", ""),
        "owner": ("worker of that island that may emigrate it", ""),
        "active": ("whether the copy is still on the island (false once it migrated away)", ""),
    },
    "parts": {
        "individual": ("id of the individual", ""),
        "worker": ("worker that evaluated this part", ""),
        "status": ("how this part ended: paused or interrupted", ""),
        "started": ("when this part started", _UNIX),
        "finished": ("when this part ended", _UNIX),
    },
    "jobs": {
        "job": ("job number within the run, from 0", ""),
        "start": ("when the job started", _UNIX),
        "stop": ("when the job ended; NaN while running or if it was killed", _UNIX),
        "exit_code": ("exit code of the job; -1 while running or if it was killed", ""),
        "hosts": ("JSON list of the hosts the job ran on", ""),
        "layout": ("JSON object: rank layout of the job (world size, workers, islands, ...)", ""),
        "versions": ("JSON object: software versions of the job", ""),
        "slurm": ("JSON object: SLURM job ids and variables, empty outside SLURM", ""),
    },
}
TABLE_DOCS = {
    "individuals": "one row per evaluated individual, any status",
    "epochs": "one row per epoch an objective reported; one column per metric",
    "migrations": "one row per migration or pollination of an individual",
    "population": "what this worker knew of its island when its job ended cleanly",
    "jobs": "one row per job (allocation) that worked on the run",
    "parts": "one row per earlier part of an evaluation done in several (paused at a rung, or "
             "interrupted by a stop, then continued); the individuals table has its last",
}
CHUNK_ROWS = {"individuals": 512, "epochs": 2048, "migrations": 512, "population": 4096,
              "jobs": 64, "parts": 512}

RESERVED_COLUMNS: tuple[str, ...] = tuple(COLUMNS["individuals"])
EPOCH_COLUMNS: tuple[str, ...] = tuple(COLUMNS["epochs"])


INT64 = np.iinfo(np.int64)


def check_param_names(space: Space) -> None:
    """Refuse what the individuals table cannot hold: a parameter name that collides with a
    fixed column, that is empty or has control characters (HDF5 cuts a column name at NUL),
    or an integer choice beyond 64 bits (found at the first row, it would end the run)."""
    for param in space.params:
        name = param.name
        if name in RESERVED_COLUMNS:
            raise ConfigError(f"space.{name}: the name {name!r} is reserved for the record; "
                              "rename the parameter")
        if not name.strip() or any(ord(c) < 32 or ord(c) == 127 for c in name):
            raise ConfigError(f"space: the parameter name {name!r} is empty or has control "
                              "characters; give it a name the record's columns can hold")
        for choice in getattr(param, "choices", ()):
            if isinstance(choice, int) and not INT64.min <= choice <= INT64.max:
                raise ConfigError(f"space.{name}: the choice {choice} does not fit in 64 bits; "
                                  "give a smaller number, or the value as a string")


def check_metric_name(name: object) -> str:
    """A metric name must be a string that is not a fixed column of the epochs table."""
    if not isinstance(name, str) or not name:
        raise RecordError(f"metric name {name!r}: expected a non-empty string")
    if name in EPOCH_COLUMNS:
        raise RecordError(f"metric {name!r}: the name is reserved for the epochs table; "
                          "rename the metric")
    return name


def param_dtype(param: Param) -> np.dtype:
    """The column type of a parameter: categorical and ordinal values keep their own type."""
    if isinstance(param, FloatParam):
        return np.dtype("f8")
    if isinstance(param, IntParam):
        return np.dtype("i8")
    value = param.choices[0]
    if isinstance(value, bool):
        return np.dtype("?")
    if isinstance(value, int):
        return np.dtype("i8")
    if isinstance(value, float):
        return np.dtype("f8")
    return STR


def worker_individual_dtype(space: Space) -> np.dtype:
    """The individuals table of a worker file: ``error`` is the length in bytes of the row's
    text in the file's error text stream (:mod:`atoll.record.texts`), a text parameter a
    fixed-length UTF-8 column as wide as its longest choice."""
    return _individuals(space, np.dtype(np.int64), _worker_column)


def _worker_column(param: Param) -> np.dtype:
    dtype = param_dtype(param)
    if dtype.kind != "O":
        return dtype
    assert isinstance(param, CategoricalParam)
    width = max(len(str(c).encode()) for c in param.choices)
    return h5py.string_dtype("utf-8", max(1, width))


def put_attr(obj: h5py.HLObject, name: str, value: object) -> None:
    """Set an attribute; text as a fixed-length UTF-8 string. HDF5 keeps that in the attribute
    message, which it checksums; a variable-length string goes to the file's global heap, which
    it does not: a damaged byte there passed unseen, or sent every reader into an endless loop."""
    if isinstance(value, str):
        data = value.encode()
        obj.attrs.create(name, np.array(data, dtype=h5py.string_dtype("utf-8", max(1, len(data)))))
    else:
        obj.attrs[name] = value


def param_doc(param: Param) -> str:
    if isinstance(param, FloatParam):
        scale = "log" if param.log else "linear"
        return f"parameter: float in [{param.low}, {param.high}], {scale} scale"
    if isinstance(param, IntParam):
        return f"parameter: integer in [{param.low}, {param.high}]"
    assert isinstance(param, CategoricalParam)
    return f"parameter: {param.kind}, one of {list(param.choices)}"


def individual_dtype(space: Space) -> np.dtype:
    return _individuals(space, STR, param_dtype)


def _individuals(space: Space, error: np.dtype,
                 column: Callable[[Param], np.dtype]) -> np.dtype:
    """The individuals table's type: the Individual's fields, ``error``, then a column per
    parameter."""
    check_param_names(space)
    enums = {"origin": ORIGIN, "status": STATUS}
    fixed = [(name, enums.get(name, kind)) for name, kind in FIELDS] + [("error", error)]
    return np.dtype(fixed + [(p.name, column(p)) for p in space.params])


def read_individual_dtype(space: Space) -> np.dtype:
    """The individuals of a run as read (and of results.h5): a worker file's columns, and
    ``eval_seconds`` after ``finished``."""
    base = individual_dtype(space)
    columns = []
    for name in base.names or ():
        columns.append((name, base[name]))
        if name == "finished":
            columns.append(("eval_seconds", np.dtype("f8")))
    return np.dtype(columns)


def part_dtype() -> np.dtype:
    return np.dtype([("individual", "i8"), ("worker", "i4"), ("status", STATUS),
                     ("started", "f8"), ("finished", "f8")])


def check_record_fits(space: Space) -> None:
    """Refuse a space whose individuals table HDF5 cannot describe, before anything is written.

    HDF5 keeps a table's column list in one object header message of at most 64 KiB: about
    1,000 parameters with short names, fewer with long ones. Found in the first job's worker
    files instead, the failure would leave the job "running" and recur on every resume.
    """
    dtype = individual_dtype(space)
    reason = ""
    if len(dtype.names or ()) > MAX_COLUMNS:
        reason = f"no table has more than {MAX_COLUMNS:,} columns"
    else:
        try:
            with h5py.File(io.BytesIO(), "w") as f:
                f.create_dataset("individuals", shape=(0,), maxshape=(None,), chunks=(1,),
                                 dtype=dtype)
        except (ValueError, OSError, RuntimeError) as exc:
            reason = str(exc).splitlines()[0]
    if reason:
        names = sum(len(n) for n in space.names)
        raise ConfigError(f"space: {len(space)} parameters ({names:,} characters of names) are "
                          "more than an HDF5 table's columns can describe (about 1,000 short-named "
                          f"ones fit; {reason}); use fewer parameters or shorter names")


MAX_COLUMNS = 4096
"""More columns than any table's column list holds: each column takes at least 16 of its 64 KiB.
A larger space is refused without asking HDF5, which takes minutes to build such a type."""


def epoch_dtype(metric_names: Iterable[str]) -> np.dtype:
    metrics = [(check_metric_name(m), "f8") for m in metric_names]
    return np.dtype([("individual", "i8"), ("epoch", "i4"), ("time", "f8")] + metrics)


def migration_dtype() -> np.dtype:
    return np.dtype([("individual", "i8"), ("version", "i4"), ("mode", MODE),
                     ("from_island", "i4"), ("to_island", "i4"), ("from_worker", "i4"),
                     ("to_worker", "i4"), ("time", "f8")])


def population_dtype() -> np.dtype:
    return np.dtype([("id", "i8"), ("version", "i4"), ("island", "i4"), ("owner", "i4"),
                     ("active", "?")])


def job_dtype() -> np.dtype:
    return np.dtype([("job", "i4"), ("start", "f8"), ("stop", "f8"), ("exit_code", "i4"),
                     ("hosts", STR), ("layout", STR), ("versions", STR), ("slurm", STR)])


def create_table(group: h5py.Group, name: str, dtype: np.dtype, *, table: str | None = None,
                 extra_docs: Mapping[str, str] | None = None, data: np.ndarray | None = None,
                 compress: bool = False) -> h5py.Dataset:
    """Create table ``name`` (of kind ``table``, default ``name``) with its column attributes.

    ``data``, if given, becomes the table's committed rows, its text in columns as wide as
    their longest value (:func:`fixed_text`). Worker files are never compressed:
    an uncompressed chunk keeps its place in the file, which keeps a killed flush local.
    """
    kind = table or name
    rows = 0 if data is None else len(data)
    if data is not None:
        data = fixed_text(data)
        dtype = data.dtype
    chunk = CHUNK_ROWS[kind]
    ds = group.create_dataset(name, shape=(rows,), maxshape=(None,), chunks=(chunk,),
                              dtype=dtype, compression="gzip" if compress else None,
                              shuffle=compress)
    if rows:
        ds[...] = data
    put_attr(ds, "description", TABLE_DOCS[kind])
    docs = COLUMNS[kind]
    for column in dtype.names or ():
        if column in docs:
            meaning, unit = docs[column]
            put_attr(ds, f"doc:{column}", meaning)
            if unit:
                put_attr(ds, f"unit:{column}", unit)
        elif extra_docs and column in extra_docs:
            put_attr(ds, f"doc:{column}", extra_docs[column])
    ds.attrs[ROWS_ATTR] = rows
    ds.attrs[CHECKSUM_ATTR] = checksum_value(rows, 0 if data is None else checksum(data))
    return ds


def fixed_text(table: np.ndarray) -> np.ndarray:
    """``table`` with its text columns as fixed-length UTF-8 strings, as wide as their longest
    value. A table written whole (run.h5's jobs, results.h5) so keeps its text in the rows, which
    its checksum covers, and not in HDF5's global heap: nothing checks that heap, and a damaged
    header in it sends HDF5 into an endless loop. Worker files append, so their widths are set
    when they are created (:func:`worker_individual_dtype`)."""
    names = table.dtype.names or ()
    texts = {name: [value.encode() if isinstance(value, str) else bytes(value)
                    for value in table[name]]
             for name in names if table.dtype[name].kind == "O"}
    if not texts:
        return table
    out = np.empty(len(table), dtype=[
        (name, h5py.string_dtype("utf-8", max([1, *map(len, texts[name])])) if name in texts
         else table.dtype[name]) for name in names])
    for name in names:
        out[name] = texts[name] if name in texts else table[name]
    return out


def param_docs(space: Space) -> dict[str, str]:
    return {p.name: param_doc(p) for p in space.params}


def metric_docs(names: Iterable[str]) -> dict[str, str]:
    return {m: "metric reported by the objective" for m in names}
