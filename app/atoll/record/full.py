"""A full disk (or quota) is a stop, not a crash.

HDF5 reports a failed write as an ``OSError`` or, from a flush or close, as a ``RuntimeError``
whose text holds ``errno = 28``. After such a failure the HDF5 file object is poisoned: every
later flush fails again, and closing it (explicitly, by garbage collection or at exit) can
crash the process in ``H5D_close`` (a segfault, exit 139). :func:`abandon` avoids that: it
points the file's descriptor at ``/dev/null`` before closing, so HDF5's closing writes go
nowhere and the file on disk keeps what was written before the failure, as after a kill
(which every record file survives: readers trust only committed rows).

Files written once are built in memory and written with plain writes
(:func:`built_in_memory`): HDF5 then never meets the full disk at all.

A process that meets a full disk reports it here once (:func:`report`); the job listens
(:func:`listening`) to stop every rank, and ends with its own exit code (74).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import h5py

from atoll.errors import RecordError
from atoll.record._h5 import open_h5, write_error, written_whole

T = TypeVar("T")
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_ERRNO_TEXT = re.compile(r"errno = (\d+)")

_seen: list[str] = []
_listeners: list[Callable[[str], None]] = []


class DiskFull(RecordError):
    """A record file could not be written: no space left (or quota exceeded)."""


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an error it was raised from) is a full disk or an exceeded quota."""
    for _ in range(10):  # a chain of causes, never a cycle
        if exc is None:
            return False
        if isinstance(exc, DiskFull):
            return True
        if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
            return True
        found = _ERRNO_TEXT.search(str(exc))
        if found and int(found.group(1)) in FULL_ERRNOS:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


ROOM_MARGIN = 64 * 1024
"""Bytes a growing file leaves free: HDF5's own metadata, and other writers of the disk."""


def ensure_room(path: Path, size: int, margin: int = ROOM_MARGIN) -> None:
    """Raise ENOSPC before writing about ``size`` bytes to ``path`` where they might not fit.

    A write that fails halfway can leave HDF5's metadata pointing at pieces it never wrote;
    stopping while the data and ``margin`` still fit keeps the file as whole as a kill does.
    A quota is not seen here: it still fails in the write."""
    try:
        stat = os.statvfs(path.parent)
    except OSError:
        return
    if stat.f_bavail * stat.f_frsize < size + margin:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def message(path: Path, exc: BaseException | None = None) -> str:
    """The one line for a full disk at ``path``."""
    reason = "disk quota exceeded" if _errno(exc) == errno.EDQUOT else "no space left on device"
    return f"{path}: {reason}"


def abandon(f: h5py.File) -> None:
    """Close an HDF5 file after a failed write without writing to it again (see module doc)."""
    with contextlib.suppress(Exception):
        fd = f.id.get_vfd_handle()
        null = os.open(os.devnull, os.O_RDWR)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)
    with contextlib.suppress(Exception):
        f.close()


@contextlib.contextmanager
def guarded(f: h5py.File, path: Path) -> Iterator[h5py.File]:
    """Use and close ``f``; a full disk while writing it abandons the file, reports, and raises
    :class:`DiskFull`. The file is flushed before it is closed, so that a failure happens where
    it can still be caught (and not in a close that would crash)."""
    try:
        yield f
        f.flush()
    except BaseException as exc:
        if not is_disk_full(exc):
            f.close()
            raise
        abandon(f)
        text = message(path, exc)
        report(text)
        raise DiskFull(text) from None
    f.close()


@contextlib.contextmanager
def built_in_memory(path: Path, *, fsync: bool = False, **options: object
                    ) -> Iterator[h5py.File]:
    """A new HDF5 file built in memory, then written to ``path`` whole (or not at all) with
    plain file writes. A failed write inside HDF5 may free half-written objects before anyone
    can :func:`abandon` the file (a crash); a failed plain write is just an ``OSError``, so a
    full disk leaves no file and raises :class:`DiskFull`. Costs the file's size in memory:
    for files written once (results.h5, weight files), not for the growing worker files."""
    buffer = io.BytesIO()
    with h5py.File(buffer, "w", **options) as f:
        yield f
    with creating(path), written_whole(path, fsync=fsync) as temp, open(temp, "wb") as out:
        out.write(buffer.getbuffer())


def edit_whole(path: Path, change: Callable[[h5py.File], T], *, hint: str, kind: str) -> T:
    """Apply ``change`` to an Atoll file as a whole: to a copy in memory, written back with one
    ``os.replace`` (made durable first), so that a kill at any moment leaves the old file or
    the new one. For small files changed now and then (``run.h5``).

    A disk too full for the copy gets the change in place instead (a job's end row fits where
    it was), as before whole-file writes; a full disk there too raises :class:`DiskFull`."""
    try:
        buffer = io.BytesIO(path.read_bytes())
    except OSError as exc:
        raise RecordError(f"{path}: cannot read ({os.strerror(exc.errno or 0)}); {hint}") \
            from None
    with open_h5(path, hint=hint, kind=kind, edit=buffer) as f:
        result = change(f)
    try:
        with written_whole(path, fsync=True) as temp:
            temp.write_bytes(buffer.getbuffer())
        return result
    except OSError as exc:
        if not is_disk_full(exc):
            raise write_error(path.parent, exc) from exc
    with creating(path), guarded(h5py.File(path, "r+"), path) as f:
        change(f)
    return result


@contextlib.contextmanager
def creating(path: Path) -> Iterator[None]:
    """Around writing a file whole: a full disk met outside an open HDF5 file (creating it,
    ``fsync``) is reported and raised as :class:`DiskFull` too."""
    try:
        yield
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        text = message(path, exc)
        report(text)
        raise DiskFull(text) from None


def report(text: str) -> None:
    """Remember that the disk is full (the first report counts) and tell the listeners."""
    if not _seen:
        _seen.append(text)
    for listener in list(_listeners):
        listener(text)


def seen() -> str:
    """The first full-disk report of this process, or ``""``."""
    return _seen[0] if _seen else ""


@contextlib.contextmanager
def listening(listener: Callable[[str], None]) -> Iterator[None]:
    """Call ``listener`` on every report while the block runs (a job: to stop every rank);
    reports of an earlier job in this process are forgotten."""
    _seen.clear()
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)


def _errno(exc: BaseException | None) -> int | None:
    if isinstance(exc, OSError) and exc.errno:
        return exc.errno
    found = _ERRNO_TEXT.search(str(exc)) if exc is not None else None
    return int(found.group(1)) if found else None
