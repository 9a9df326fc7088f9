"""A worker file's HDF5 layer: created whole, opened in SWMR write mode in one step, and its
tables appended to and committed through h5py's low-level API. :mod:`atoll.record.writer`
decides what to write and when."""

from __future__ import annotations

import os
import time
from pathlib import Path

import h5py
import numpy as np

from atoll.backoff import Backoff
from atoll.errors import RecordError
from atoll.record import texts
from atoll.record._h5 import (
    RUN_ID_ATTR,
    SWMR_LIBVER,
    WORKER_KIND,
    to_json,
    write_error,
    write_header,
    written_whole,
)
from atoll.record.commits import CHECKSUM_ATTR, ROWS_ATTR, checksum, checksum_value
from atoll.record.schema import (
    create_table,
    epoch_dtype,
    migration_dtype,
    param_docs,
    population_dtype,
    put_attr,
    worker_individual_dtype,
)
from atoll.space import Space


def create_worker_file(path: Path, space: Space, *, job: int, worker: int, run_id: str) -> None:
    """Write the empty file under a temporary name and move it in place."""
    if path.exists():
        raise RecordError(f"{path}: exists already; each job writes new worker files, so "
                          "this job number was used before")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with written_whole(path) as temp, h5py.File(temp, "w", libver=SWMR_LIBVER) as f:
            write_header(f, WORKER_KIND, job=job, worker=worker, created=time.time(),
                         closed=False, space=to_json(space.to_dict()), **{RUN_ID_ATTR: run_id})
            ds = create_table(f, "individuals", worker_individual_dtype(space),
                              extra_docs=param_docs(space))
            put_attr(ds, "doc:error", "length of its error text in 'error_text' (0 if none)")
            put_attr(ds, "unit:error", "bytes")
            ds.attrs[CHECKSUM_ATTR] = checksum_value(0, 0, 0)
            put_attr(texts.create(f), "description", texts.DOC)
            create_table(f, "epochs", epoch_dtype(()))
            create_table(f, "migrations", migration_dtype())
            create_table(f, "population", population_dtype())  # filled at a clean end
    except OSError as exc:  # read-only, full, no permission: one line, no half-written file
        raise write_error(path.parent, exc) from exc


LOCK_WAIT = 10.0
"""Seconds a writer waits for another program's HDF5 lock on its worker file to go. Where
``HDF5_USE_FILE_LOCKING`` is set (the jobscripts and the image set ``BEST_EFFORT``) it
overrides a reader's ``locking=False``: a reader opening the file with it set (a user's h5py
or h5ls; Atoll's own commands turn it off) locks it while it opens, and a writer opening it
then is refused. A writer opens its file when the job starts and again after each new metric
column."""


def open_swmr_writing(path: Path) -> h5py.File:
    """Open ``path`` in SWMR write mode in one step, waiting out a reader's lock. Opening it
    for writing first and switching to SWMR after (h5py's ``swmr_mode = True``) marks the file
    in between as open for plain writing: a kill there left a file that no reader opens."""
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_V110, h5py.h5f.LIBVER_LATEST)  # SWMR_LIBVER
    fapl.set_fclose_degree(h5py.h5f.CLOSE_STRONG)
    deadline = time.monotonic() + LOCK_WAIT
    backoff = Backoff(start=1e-3, limit=0.1)
    while True:
        try:
            return h5py.File(h5py.h5f.open(os.fsencode(path),
                                           h5py.h5f.ACC_RDWR | h5py.h5f.ACC_SWMR_WRITE,
                                           fapl=fapl))
        except BlockingIOError:  # another program's lock (EAGAIN)
            if time.monotonic() >= deadline:
                raise RecordError(
                    f"{path}: another program has held a lock on this worker file for "
                    f"{LOCK_WAIT:g} s, so this job cannot write it; close that program, or "
                    "open the file without locks (HDF5_USE_FILE_LOCKING=FALSE in its "
                    "environment), then resume") from None
            backoff.wait()


class AppendTable:
    """One table's appends through h5py's low-level API: the high-level ``ds[a:b] = rows``
    costs about ten times more per call, which matters when every flush is small."""

    def __init__(self, ds: h5py.Dataset, dtype: np.dtype,
                 stream: h5py.Dataset | None = None) -> None:
        """``stream``: where the rows' error texts go; their lengths are the ``error`` column."""
        self.dtype = dtype
        self.rows = int(ds.attrs[ROWS_ATTR])  # committed rows
        self._crc = int(ds.attrs[CHECKSUM_ATTR][1])  # of the committed rows
        self._written_crc = self._crc
        self._id = ds.id
        self._mtype = h5py.h5t.py_create(dtype)
        self._rows_attr = h5py.h5a.open(ds.id, ROWS_ATTR.encode())
        self._checksum_attr = h5py.h5a.open(ds.id, CHECKSUM_ATTR.encode())
        self._texts: texts.Stream | None = None
        if stream is not None:
            end = int(ds.fields("error")[: self.rows].sum()) if self.rows else 0
            self._texts = texts.Stream(stream, end, int(ds.attrs[CHECKSUM_ATTR][2]))

    def write(self, rows: np.ndarray, text: bytes = b"") -> int:
        """Write ``rows`` (and their error texts) after the committed ones; return the row
        count to commit.

        Starting at the committed count, a flush retried after an error overwrites its own
        rows instead of adding them twice.
        """
        end = self.rows + len(rows)
        self._id.set_extent((end,))
        target = self._id.get_space()
        target.select_hyperslab((self.rows,), (len(rows),))
        self._id.write(h5py.h5s.create_simple((len(rows),)), target, rows, self._mtype)
        self._written_crc = checksum(rows, self._crc)
        if self._texts is not None:
            self._texts.write(text)
        return end

    def commit(self, rows: int) -> None:
        """Raise the committed count, then the checksum that covers the new rows."""
        self._rows_attr.write(np.array(rows, dtype=np.int64))
        text_crc = None if self._texts is None else self._texts.written_crc
        self._checksum_attr.write(checksum_value(rows, self._written_crc, text_crc))
        self.rows = rows
        self._crc = self._written_crc
        if self._texts is not None:
            self._texts.commit()
