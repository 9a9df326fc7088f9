"""The per-worker log: one HDF5 file per worker leader and job, written only by that leader.

Rows wait in memory (plain tuples) and reach the file only in :meth:`WorkerLog.flush`: one
resize and one slice assignment per table (and one for the error texts,
:mod:`atoll.record.texts`), ``h5file.flush()``, then the tables' ``rows`` attributes are raised
to the new counts and the file is flushed again. No text goes to HDF5's global heap.

A flush is due after each evaluation and after each epoch reported, once ``flush_interval``
seconds have passed, so a long evaluation's curve reaches the file (and ``atoll watch``) while
it trains. A thread (:class:`atoll.record.ticker.Ticker`) flushes rows that waited that long
while the loop's thread is inside an evaluation that reports nothing: else a finished
evaluation's row could wait for the whole of the next one, and a kill -9 meanwhile lose it.
The listeners of written rows are told on the loop's thread only (at its next flush).

Before a checkpoint is written, and at the next epoch reported after it, the rows
are flushed at once: the record then holds every epoch a checkpoint holds, whichever comes
first in the objective, and an evaluation continued from it after a kill has its whole curve.

The file is written in HDF5's SWMR mode. Without it, HDF5 writes its metadata at a flush in
no particular order, and a kill in the middle of one can leave a committed table behind a
pointer past the file's recorded end ("addr overflow": one CI run in five met it). In SWMR
mode HDF5 writes every child before its parent, and readers (opened with ``swmr=True``, as
:func:`atoll.record._h5.open_h5` does) ignore the recorded end: the file opens after a kill
at any moment, and a reader that stops at ``rows`` sees whole flushed batches only
(tests/test_record.py kills writers to prove it). SWMR mode forbids new tables, so a new
metric column is added in a rebuilt copy of the file that then replaces it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from operator import itemgetter
from pathlib import Path
from types import TracebackType
from typing import Any

import h5py
import numpy as np

from atoll.errors import RecordError
from atoll.individual import Individual, fields_of
from atoll.record import full, texts
from atoll.record._h5 import (
    SWMR_LIBVER,
    written_whole,
)
from atoll.record.commits import committed
from atoll.record.schema import (
    MODE_NAMES,
    check_metric_name,
    create_table,
    epoch_dtype,
    metric_docs,
    migration_dtype,
    population_dtype,
    worker_individual_dtype,
)
from atoll.record.ticker import Ticker
from atoll.record.worker_file import AppendTable, create_worker_file, open_swmr_writing
from atoll.space import CategoricalParam, Space

log = logging.getLogger(__name__)


class WorkerLog:
    """Append-only record of one worker leader in one job."""

    def __init__(self, path: Path, space: Space, *, job: int, worker: int,
                 flush_interval: float, run_id: str = "",
                 may_write: Callable[[], bool] = lambda: True) -> None:
        if not flush_interval >= 0:
            raise ValueError(f"flush_interval: expected seconds >= 0, got {flush_interval!r}")
        self.path = Path(path)
        self._ind_dtype = worker_individual_dtype(space)
        self._mig_dtype = migration_dtype()
        self._params = _param_getter(space.names)
        self._code = _text_coder(space)
        self._interval = float(flush_interval)
        self._individuals: list[tuple[Any, ...]] = []
        self._texts: list[bytes] = []  # error texts of the pending individuals, in row order
        self._epochs: list[tuple[int, int, float, dict[str, float]]] = []
        self._migrations: list[tuple[Any, ...]] = []
        self._columns: list[str] = []  # metric columns of the epochs table in the file
        self._known: dict[str, None] = {}  # metrics seen so far (file or pending), in order
        create_worker_file(self.path, space, job=job, worker=worker, run_id=run_id)
        self._tables: dict[str, AppendTable] = {}
        self._open()
        self._closed = False
        self.full = ""  # where the disk was full: rows are dropped from then on
        self._may_write = may_write
        """Asked before each flush: False once another job took the run over, whose ids and
        budget these rows must not touch; they are dropped then, and said."""
        self._last_flush = time.monotonic()
        self._next_epoch_now = False  # set before a checkpoint: flush its epoch's row at once
        self._at_once: set[int] = set()  # individuals whose rows are flushed when added
        self._written: list[Callable[[list[int]], None]] = []  # told each flush's individuals
        self._untold: list[int] = []  # ids the ticker's flushes wrote, not yet told
        self._failed: Exception | None = None
        """A flush that failed inside an evaluation, raised at the loop's next flush: a record
        that cannot be written ends the search (one line naming the rank), and never shows as
        the objective's failure."""
        self._lock = threading.RLock()  # the rows and the file, shared with the ticker
        self._ticker = self._start_ticker(worker)

    def _start_ticker(self, worker: int) -> Ticker | None:
        if self._interval == 0:  # every flush is due at once: the loop's are enough
            return None
        try:
            return Ticker(self._flush_waiting, max(self._interval / 4, 0.05),
                          name=f"atoll-flush-{worker}")
        except RuntimeError as exc:  # no thread to be had (a process limit)
            log.warning("%s: rows are written after evaluations and epochs only (%s)",
                        self.path, exc)
            return None

    def when_written(self, listener: Callable[[list[int]], None]) -> None:
        """Tell ``listener`` the ids of the individuals each flush put in the file, once their
        rows are committed: what must outlive an evaluation until its row is safe (its
        checkpoint, for one) may go then. Rows dropped (a full disk, a run taken over) are
        never told."""
        self._written.append(listener)

    # -- appending: memory only ------------------------------------------------------------
    def add_individual(self, ind: Individual) -> None:
        """Queue a finished evaluation (any status)."""
        try:
            params = self._params(ind.params)
        except KeyError as exc:
            raise RecordError(f"individual {ind.id}: no value for parameter {exc.args[0]!r}") \
                from None
        if self._code is not None:
            params = self._code(ind.id, params)
        text = texts.encode(ind.error) if ind.error else b""
        with self._lock:
            self._individuals.append(fields_of(ind) + (len(text),) + params)
            if text:
                self._texts.append(text)
            if ind.id in self._at_once:
                self._at_once.discard(ind.id)
                self.flush()

    def write_at_once(self, individual_id: int) -> None:
        """Flush the next row of ``individual_id`` as soon as it is added, and tell the
        listeners (:meth:`when_written`): what stands for its evaluation until then (a
        promotion's claim) must not outlive it by a flush interval, when a kill would leave
        neither."""
        with self._lock:
            self._at_once.add(individual_id)

    def add_epoch(self, individual_id: int, epoch: int, time: float,
                  metrics: Mapping[str, float]) -> None:
        """Queue one epoch; a metric never seen before gets its own column at the next flush."""
        try:
            values = {name: float(value) for name, value in metrics.items()}
        except (TypeError, ValueError) as exc:
            raise RecordError(f"individual {individual_id}, epoch {epoch}: metrics must be "
                              f"numbers, got {dict(metrics)!r}") from exc
        with self._lock:
            if not self._known.keys() >= values.keys():
                for name in values:
                    self._known.setdefault(check_metric_name(name))
            self._epochs.append((individual_id, epoch, time, values))
            at_once, self._next_epoch_now = self._next_epoch_now, False
            self._flush_inside_evaluation(at_once)

    def before_checkpoint(self) -> None:
        """The running evaluation is about to write a checkpoint: the rows so far reach the
        file first, and the next epoch's as soon as it is reported (an objective may report
        an epoch before or after saving it)."""
        with self._lock:
            self._flush_inside_evaluation(at_once=bool(self.pending))
            self._next_epoch_now = True

    def _flush_inside_evaluation(self, at_once: bool) -> None:
        if self._failed is not None:
            return
        try:
            if at_once:
                self.flush()
            else:
                self.maybe_flush()
        except Exception as exc:  # noqa: BLE001 - raised again by the loop's flush
            self._failed = exc

    def add_migration(self, individual_id: int, version: int, mode: str, from_island: int,
                      to_island: int, from_worker: int, to_worker: int, time: float) -> None:
        """Queue one migration (``mode="migration"``) or pollination."""
        try:
            code = MODE_NAMES[mode]
        except KeyError:
            raise ValueError(f"mode: expected one of {list(MODE_NAMES)}, got {mode!r}") from None
        with self._lock:
            self._migrations.append((individual_id, version, code, from_island, to_island,
                                     from_worker, to_worker, time))

    @property
    def pending(self) -> int:
        """Rows waiting for the next flush, over all tables."""
        return len(self._individuals) + len(self._epochs) + len(self._migrations)

    # -- writing ---------------------------------------------------------------------------
    def maybe_flush(self, now: float | None = None) -> bool:
        """Flush if ``flush_interval`` seconds passed since the last flush and rows wait.

        ``now`` is a ``time.monotonic()`` reading, for callers that already have one.
        """
        if self._failed is not None:
            raise self._failed
        if now is None:
            now = time.monotonic()
        if now - self._last_flush < self._interval and not self._untold:
            return False  # the common case, without the lock
        with self._lock:
            due = self._due(now)
            if due:
                self.flush()
            else:
                self._tell_written()
        return due

    def _due(self, now: float) -> bool:
        return now - self._last_flush >= self._interval and self.pending > 0

    def _flush_waiting(self) -> None:
        """The ticker's: flush rows that waited ``flush_interval`` seconds (the loop's thread
        is in a long evaluation); a failure is raised on the loop's thread at its next flush."""
        with self._lock:
            if self._closed or self._failed is not None or not self._due(time.monotonic()):
                return
            try:
                self._flush()
            except Exception as exc:  # noqa: BLE001 - raised again by the loop's flush
                self._failed = exc

    def flush(self) -> None:
        """Write every pending row, then commit the new row counts.

        A full disk abandons the file (:mod:`atoll.record.full`: it keeps its committed rows)
        and reports it, which stops the job; rows queued after that are dropped."""
        with self._lock:
            self._flush()
            self._tell_written()

    def _tell_written(self) -> None:
        ids, self._untold = self._untold, []
        if ids:
            for listener in self._written:
                listener(ids)

    def _flush(self) -> None:
        if self._failed is not None:
            raise self._failed
        if self.full:
            self._drop_pending()
            return
        if not self._may_write():
            if self._individuals:
                log.warning("%s: %d evaluation(s) not written: another job took over the run "
                            "directory; they are not part of the run", self.path,
                            len(self._individuals))
            self._drop_pending()
            return
        if self._closed:
            raise RecordError(f"{self.path}: the worker log is closed")
        ids = [row[0] for row in self._individuals]
        try:
            full.ensure_room(self.path, self._pending_bytes())
            self._write_pending()
        except Exception as exc:
            if not full.is_disk_full(exc):
                raise
            self._abandon(exc)
        self._drop_pending()
        if ids and not self.full:
            self._untold.extend(ids)

    def _pending_bytes(self) -> int:
        """About what the next flush writes: its rows, their texts, and a rebuilt copy of the
        file when a new metric column is due."""
        size = len(self._individuals) * self._ind_dtype.itemsize + sum(map(len, self._texts))
        size += len(self._epochs) * 8 * (3 + len(self._known))
        size += len(self._migrations) * self._mig_dtype.itemsize
        if len(self._known) > len(self._columns):
            size += self.path.stat().st_size
        return size

    def _abandon(self, exc: BaseException) -> None:
        """After a full disk: close without writing again (the file handles last), report."""
        self.full = full.message(self.path, exc)
        self._closed = True
        full.abandon(self._file)
        self._tables.clear()
        full.report(self.full)

    def _drop_pending(self) -> None:
        self._individuals.clear()
        self._texts.clear()
        self._epochs.clear()
        self._migrations.clear()
        self._last_flush = time.monotonic()

    def _write_pending(self) -> None:
        if len(self._known) > len(self._columns):
            self._widen_epochs()
        # Epochs commit before individuals: a reader that sees an individual sees its epochs.
        written: list[tuple[AppendTable, int]] = []
        if self._epochs:
            table = self._tables["epochs"]
            written.append((table, table.write(self._epoch_array())))
        if self._individuals:
            table = self._tables["individuals"]
            written.append((table, table.write(self._individual_array(), b"".join(self._texts))))
        if self._migrations:
            table = self._tables["migrations"]
            written.append((table, table.write(np.array(self._migrations, dtype=table.dtype))))
        if written:
            self._file.flush()  # the rows are in the file ...
            for table, rows in written:
                table.commit(rows)
            self._file.flush()  # ... before the counts that make readers see them

    def close(self, population: Iterable[Individual] | None = None) -> None:
        """Flush and close; calling it again does nothing. ``population``: what this worker
        knows of its island at the end of a clean job, stored with the last rows."""
        if self._ticker is not None:
            self._ticker.stop()
        with self._lock:
            self._close(population)

    def _close(self, population: Iterable[Individual] | None) -> None:
        if self._closed:  # abandoned (a full disk): what was written before may still go
            self._tell_written()
            return
        try:
            self.flush()
            if self.full:
                return
            if population is not None and self._may_write():
                table = self._tables["population"]
                rows = np.array([(i.id, i.version, i.island, i.owner, i.active)
                                 for i in population], dtype=table.dtype)
                full.ensure_room(self.path, rows.nbytes, margin=0)  # the last write
                table.commit(table.write(rows))
            self._file.attrs["closed"] = True
            self._file.flush()
        except Exception as exc:
            if not full.is_disk_full(exc):
                raise
            self._abandon(exc)
            return
        finally:
            self._closed = True
            self._tables.clear()  # drop the attribute handles before the file closes
            self._file.close()

    def __enter__(self) -> WorkerLog:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------
    def _open(self) -> None:
        """Open the file for appending in SWMR mode, its tables at their committed rows."""
        self._file = open_swmr_writing(self.path)
        self._tables = {name: AppendTable(self._file[name], dtype) for name, dtype in (
            ("epochs", epoch_dtype(self._columns)), ("migrations", self._mig_dtype),
            ("population", population_dtype()))}
        self._tables["individuals"] = AppendTable(self._file["individuals"], self._ind_dtype,
                                             self._file[texts.STREAM])

    def _individual_array(self) -> np.ndarray:
        try:
            return np.array(self._individuals, dtype=self._ind_dtype)
        except (TypeError, ValueError, OverflowError):
            raise RecordError(_diagnose(self._individuals, self._ind_dtype)) from None

    def _epoch_array(self) -> np.ndarray:
        rows = self._epochs
        out = np.empty(len(rows), dtype=self._tables["epochs"].dtype)
        out["individual"] = [r[0] for r in rows]
        out["epoch"] = [r[1] for r in rows]
        out["time"] = [r[2] for r in rows]
        nan = math.nan
        for name in self._columns:
            out[name] = [r[3].get(name, nan) for r in rows]
        return out

    def _widen_epochs(self) -> None:
        """Rebuild the epochs table with the new metric columns (old rows get NaN).

        In a new file that replaces this one whole (made durable first, as a checkpoint): a kill
        of the job or a crash of the node leaves the old file or the new one.
        The other tables and the attributes are copied as they are (committed rows only are
        in them: nothing is pending while this runs).
        """
        columns = list(self._known)
        dtype = epoch_dtype(columns)
        self._tables.clear()  # drop the attribute handles before the file closes
        self._file.close()
        try:
            with written_whole(self.path, fsync=True) as temp, \
                    h5py.File(self.path, "r", libver=SWMR_LIBVER) as old, \
                    h5py.File(temp, "w", libver=SWMR_LIBVER) as new:
                for name, value in old.attrs.items():
                    new.attrs[name] = value
                for name in ("individuals", texts.STREAM, "migrations", "population"):
                    old.copy(old[name], new, name)
                rows = committed(old["epochs"])
                data = np.empty(len(rows), dtype=dtype)
                for name in columns:
                    data[name] = math.nan
                for name in rows.dtype.names or ():
                    data[name] = rows[name]
                create_table(new, "epochs", dtype, data=data, extra_docs=metric_docs(columns))
        except BaseException:
            with suppress(OSError, RecordError):  # a full disk: the old file is still whole
                self._open()
            raise
        self._columns = columns
        self._open()
        log.debug("%s: epochs table now has metrics %s", self.path, columns)


def _param_getter(names: tuple[str, ...]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    if len(names) == 1:
        name = names[0]
        return lambda params: (params[name],)
    return itemgetter(*names)


def _text_coder(space: Space) -> Callable[[int, tuple[Any, ...]], tuple[Any, ...]] | None:
    """What turns a row's text parameters into the UTF-8 bytes of their choice (None: the space
    has none). Numpy would encode text as ASCII, and cut a value wider than its column
    silently: a value that is not one of the choices is refused instead."""
    coded = [(k, p.name, {c: str(c).encode() for c in p.choices})
             for k, p in enumerate(space.params)
             if isinstance(p, CategoricalParam) and isinstance(p.choices[0], str)]
    if not coded:
        return None

    def code(ind_id: int, row: tuple[Any, ...]) -> tuple[Any, ...]:
        out = list(row)
        for k, name, choices in coded:
            try:
                out[k] = choices[out[k]]
            except (KeyError, TypeError):
                raise RecordError(f"individual {ind_id}: parameter {name!r} is {out[k]!r}, not "
                                  f"one of its choices {list(choices)}") from None
        return tuple(out)

    return code


def _diagnose(rows: list[tuple[Any, ...]], dtype: np.dtype) -> str:
    """Name the first value that does not fit its column."""
    names = dtype.names or ()
    for row in rows:
        for name, value in zip(names, row, strict=False):
            try:
                np.array([(value,)], dtype=[(name, dtype[name])])
            except (TypeError, ValueError, OverflowError):
                return (f"individual {row[0]}: column {name!r} cannot hold {value!r} "
                        f"(expected {dtype[name]})")
    return "individuals: rows do not fit the table"
