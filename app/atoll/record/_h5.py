"""Writing and opening record files: whole or not at all, with a header naming what they are,
errors a user can act on, and JSON attributes."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import io
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np

import atoll
from atoll.errors import RecordError
from atoll.record.paths import temp_for
from atoll.record.schema import SCHEMA_VERSION, STR, put_attr

KIND_ATTR = "kind"
RUN_KIND = "atoll-run"
WORKER_KIND = "atoll-worker"
RESULTS_KIND = "atoll-results"

SWMR_LIBVER = ("v110", "latest")
"""File format bounds of the files written in SWMR mode (worker files): HDF5 1.10 and later
read them."""


@contextlib.contextmanager
def written_whole(path: Path, *, fsync: bool = False) -> Iterator[Path]:
    """Write ``path`` whole or not at all: the block writes the temporary file it is given,
    which then replaces ``path`` in one ``os.replace``. On any error the temporary file is
    removed and the error raised; ``fsync`` makes the content durable before the rename, and
    the rename after it."""
    temp = temp_for(path)
    try:
        yield temp
        if fsync:
            with open(temp, "rb+") as handle:
                os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # a read-only file system refuses even this
            temp.unlink(missing_ok=True)
        raise
    if fsync:
        _sync_directory(path.parent)


def _sync_directory(folder: Path) -> None:
    """Make the renames into ``folder`` durable: on local file systems a crash of the node (not
    of the job) can otherwise bring back the old file after its replacement was reported. A
    file system that cannot sync a directory (some network ones) keeps its own guarantees."""
    try:
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def write_header(f: h5py.File, kind: str, **attrs: Any) -> None:
    """The root attributes every Atoll file starts with, then ``attrs``."""
    put_attr(f, KIND_ATTR, kind)
    put_attr(f, "schema_version", SCHEMA_VERSION)
    put_attr(f, "atoll_version", atoll.__version__)
    for name, value in attrs.items():
        put_attr(f, name, value)


def open_h5(path: Path, *, hint: str, kind: str | None = None,
            edit: io.BytesIO | None = None) -> h5py.File:
    """Open an Atoll file read-only; RecordError if missing, damaged or too new.

    ``hint`` ends the damage message with what the user can do. Files are opened without
    HDF5's file locking: one job per run directory is :mod:`atoll.record.claim`'s job.
    ``edit``: the file's bytes, opened for writing in memory instead
    (:func:`atoll.record.full.edit_whole`).
    """
    if not path.is_file():
        if path.exists():
            raise RecordError(f"{path}: is {file_kind(path)}, not an HDF5 file; {hint}")
        raise RecordError(f"{path}: not found")
    try:
        f = _open_read(path) if edit is None else h5py.File(edit, "r+")
    except OSError as exc:
        raise RecordError(f"{path}: damaged or not an HDF5 file ({exc}); {hint}") from exc
    try:
        check_version(f, path, kind)
    except RecordError:
        f.close()
        raise
    except Exception as exc:  # h5py raises OSError, KeyError, RuntimeError... on a damaged file
        f.close()
        raise RecordError(f"{path}: damaged ({exc}); {hint}") from exc
    return f


def _open_read(path: Path) -> h5py.File:
    """A worker file whose writer runs or was killed is marked open for writing: SWMR read mode
    reads it (see :mod:`atoll.record.writer`). Every other file opens plainly, which finds
    damage at once, where SWMR mode retries every unreadable piece."""
    try:
        return h5py.File(path, "r", locking=False)
    except OSError as exc:
        if "already open for write" not in str(exc):
            raise
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_file_locking(False, False)
    fapl.set_fclose_degree(h5py.h5f.CLOSE_STRONG)
    _set_read_attempts(fapl, SWMR_READ_ATTEMPTS)
    return h5py.File(h5py.h5f.open(os.fsencode(path), h5py.h5f.ACC_RDONLY
                                   | h5py.h5f.ACC_SWMR_READ, fapl=fapl))


SWMR_READ_ATTEMPTS = 30
"""Reads of a piece of metadata in SWMR mode before it counts as damaged. A reader may meet a
piece the writer is rewriting, so HDF5 reads again after a wait that doubles from a
nanosecond: its default of 100 attempts waits for days on a piece that is damaged (a killed
writer's file hung every reader). 30 attempts wait about a second in all, far longer than a
writer takes to rewrite a piece."""


def _set_read_attempts(fapl: h5py.h5p.PropFAID, attempts: int) -> None:
    """``H5Pset_metadata_read_attempts``, which h5py does not wrap, called in the HDF5 library
    h5py's own modules use (a symbol looked up through a module finds its dependencies')."""
    function = ctypes.CDLL(h5py.h5p.__file__).H5Pset_metadata_read_attempts
    function.argtypes = [ctypes.c_int64, ctypes.c_uint]
    if function(fapl.id, attempts) < 0:
        raise RuntimeError("H5Pset_metadata_read_attempts failed")


def file_kind(path: Path) -> str:
    """What a path that is not a regular file is, in words ("a directory", "a FIFO", ...)."""
    mode = path.stat().st_mode
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def os_reason(exc: OSError) -> str:
    """The system's words for an error (its first line where it has no errno)."""
    return os.strerror(exc.errno) if exc.errno else \
        (str(exc).splitlines() or [type(exc).__name__])[0]


def write_error(path: Path, exc: OSError) -> RecordError:
    """One line for a file or directory that cannot be written (read-only, full, no access)."""
    reason = os_reason(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = "free some space or choose another directory"
    elif exc.errno == errno.ENOLCK or "unable to lock file" in str(exc):
        hint = ("its file system refuses file locks: set HDF5_USE_FILE_LOCKING=BEST_EFFORT (locks "
                "where they work) or FALSE (none); Atoll's claim file keeps one job per run "
                "either way")
    else:
        hint = "choose a writable directory"
    return RecordError(f"{path}: cannot write ({reason}); {hint}")


def check_version(f: h5py.File, path: Path, kind: str | None) -> int:
    # ``in`` first: attrs.get takes an attribute HDF5 cannot read (damage) for a missing one.
    found = text(f.attrs[KIND_ATTR]) if KIND_ATTR in f.attrs else None
    version = f.attrs["schema_version"] if "schema_version" in f.attrs else None
    if version is None or (kind is not None and found != kind):
        what = f"an {found!r} file" if found else "not an Atoll file"
        expected = f"; expected an {kind!r} file" if kind else ""
        raise RecordError(f"{path}: {what}{expected}; choose another run directory")
    if int(version) > SCHEMA_VERSION:
        raise RecordError(f"{path}: written with record schema version {int(version)}, but this "
                          f"atoll reads up to version {SCHEMA_VERSION}; upgrade atoll to read "
                          "or resume this run")
    return int(version)


def to_json(value: Any) -> str:
    """Compact JSON; values JSON lacks (TOML dates, paths) become their text."""
    return json.dumps(value, separators=(",", ":"), default=str)


def attr(obj: h5py.HLObject, name: str, path: Path, default: Any = None) -> Any:
    """An attribute's value, ``default`` if it has none; one that HDF5 cannot read is damage
    (its text in the file is unreadable), said in one line."""
    try:
        return obj.attrs[name] if name in obj.attrs else default
    except (OSError, RuntimeError, KeyError) as exc:
        raise RecordError(f"{path}: attribute {name!r} cannot be read ({exc}): the file is "
                          "damaged; restore it from a backup") from exc


def json_attr(obj: h5py.HLObject, name: str, path: Path) -> Any:
    try:
        return json.loads(text(attr(obj, name, path, "")))
    except ValueError as exc:
        raise RecordError(f"{path}: attribute {name!r} is missing or not JSON ({exc}); the "
                          "file is damaged") from exc


def count_attr(obj: h5py.HLObject, name: str, path: Path, default: int = 0) -> int:
    """An attribute that must be a count (an integer >= 0), e.g. the run's budget."""
    value = attr(obj, name, path, default)
    value = value.item() if isinstance(value, np.generic) else value
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RecordError(f"{path}: attribute {name!r} is {str(value)[:40]!r}, not a count: the "
                          "file is damaged; restore it from a backup")
    return value


RUN_ID_ATTR = "run_id"


def run_id_of(f: h5py.File) -> str:
    """The id of the run a file belongs to ('' in files written before run ids)."""
    return text(attr(f, RUN_ID_ATTR, Path(f.filename), ""))


def foreign_file(path: Path, found: str, expected: str) -> RecordError:
    """A file of another run found in this one (copied in by hand, or a mix-up of run dirs)."""
    return RecordError(f"{path}: belongs to another run (run id {found or 'none'}; this run's is "
                       f"{expected or 'none'}); move it out of {path.parent}, its rows are not "
                       "this run's")


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def plain(value: Any) -> Any:
    """A value read from HDF5 as plain Python: bytes as ``str``, numpy scalars as the Python
    value they hold."""
    if isinstance(value, bytes):
        return value.decode()
    return value.item() if isinstance(value, np.generic) else value


def decoded(table: np.ndarray) -> np.ndarray:
    """``table`` with its text as ``str`` in object columns (h5py reads variable-length strings
    as bytes, fixed-length ones as a bytes column)."""
    names = table.dtype.names or ()
    if any(table.dtype[name].kind == "S" for name in names):
        out = np.empty(len(table), dtype=[
            (name, STR if table.dtype[name].kind == "S" else table.dtype[name])
            for name in names])
        for name in names:
            out[name] = table[name]
        table = out
    for name in names:
        if table.dtype[name].kind == "O":
            table[name] = [v.decode() if isinstance(v, bytes) else v for v in table[name]]
    return table
