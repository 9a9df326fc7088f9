"""The commit protocol of a table: which rows a reader may trust.

A writer appends rows, then raises the table's ``rows`` attribute, then its ``checksum``
(the rows it covers, their CRC-32, and for a worker file's individuals the CRC-32 of their
error texts). A reader takes only the rows ``rows`` counts and checks them against the
checksum, so a writer killed mid-flush, or a byte changed later, is found and said in one line.
"""

from __future__ import annotations

import zlib

import h5py
import numpy as np

from atoll.errors import RecordError
from atoll.individual import FINISHED
from atoll.record import texts

ROWS_ATTR = "rows"
CHECKSUM_ATTR = "checksum"
DAMAGED_HINT = "restore it from a backup, or move it out of the run directory"


def committed_rows(ds: h5py.Dataset) -> int:
    """The ``rows`` attribute (all rows if it has none), checked: a writer sets it only after
    the rows are in the table, so anything but a count from 0 to the rows held is damage."""
    value = ds.attrs.get(ROWS_ATTR, ds.shape[0])
    value = value.item() if isinstance(value, np.generic) else value
    grown(ds, value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= ds.shape[0]:
        raise RecordError(f"{ds.file.filename}: table {ds.name.lstrip('/')!r} claims "
                          f"{str(value)[:40]!r} committed rows but holds {ds.shape[0]}: the file "
                          f"is damaged; {DAMAGED_HINT}")
    return value


def grown(ds: h5py.Dataset, size: object) -> None:
    """Read again the size of a table that a live writer may have grown past ``size`` since it
    was opened: a file read in SWMR mode keeps the size it found at opening, while its
    attributes are read when asked (its ``rows`` came out larger than the table)."""
    if isinstance(size, int) and not isinstance(size, bool) and size > ds.shape[0] \
            and ds.file.swmr_mode:
        ds.refresh()


def checksum(rows: np.ndarray, crc: int = 0) -> int:
    """CRC-32 of the rows' fixed-size columns (fixed-length text included; the variable-length
    strings of version 1 worker files live elsewhere in the file, unchecked), row after row,
    continuing ``crc``: the CRC of the rows before them."""
    names = [n for n in rows.dtype.names or () if rows.dtype[n].kind != "O"]
    packed = np.empty(len(rows), dtype=[(n, rows.dtype[n].newbyteorder("<")) for n in names])
    for name in names:
        packed[name] = rows[name]
    return zlib.crc32(packed.tobytes(), crc)


def checksum_value(rows: int, crc: int, text_crc: int | None = None) -> np.ndarray:
    """The ``checksum`` attribute: the committed rows it covers and their CRC-32, then (a
    worker file's individuals) the CRC-32 of their error texts."""
    return np.array([rows, crc] if text_crc is None else [rows, crc, text_crc], dtype=np.int64)


def seal(ds: h5py.Dataset) -> None:
    """Set the checksum of a table whose committed rows were changed in place (run.h5's jobs)."""
    rows = committed_rows(ds)
    ds.attrs[CHECKSUM_ATTR] = checksum_value(rows, checksum(ds[:rows]))


def committed(ds: h5py.Dataset) -> np.ndarray:
    """The committed rows of a table, checked: their checksum, an enum column holding only its
    names' values, and individual ids finished once (every reader, resume too, refuses damage
    said in one line instead of crashing on it later or carrying it into the next job; a
    paused individual promoted on the same worker has a row per part)."""
    where = f"{ds.file.filename}: table {ds.name.lstrip('/')!r}"
    stored = ds.attrs.get(CHECKSUM_ATTR)  # before rows: a live writer raises rows first
    rows = ds[: committed_rows(ds)]
    covered, text_crc = (len(rows), None) if stored is None else _check_sum(rows, stored, where)
    if rows.dtype.names and "error" in rows.dtype.names and rows.dtype["error"].kind in "iu":
        if texts.STREAM not in ds.parent:
            raise RecordError(f"{where}: its error texts ({texts.STREAM!r}) are missing: the "
                              f"file is damaged; {DAMAGED_HINT}")
        rows = texts.attach(rows, ds.parent[texts.STREAM], covered, text_crc, where,
                            DAMAGED_HINT)
    for name in rows.dtype.names or ():
        enum = h5py.check_enum_dtype(rows.dtype[name])
        if enum:
            bad = np.flatnonzero(~np.isin(rows[name], list(enum.values())))
            if len(bad):
                raise RecordError(f"{where} row {bad[0]}: {name} is {rows[name][bad[0]]}, not one "
                                  f"of {', '.join(enum)}: the file is damaged; {DAMAGED_HINT}")
    if ds.name.lstrip("/") == "individuals":
        twice = repeated(rows["id"][np.isin(rows["status"], FINISHED)])
        if twice is not None:
            raise RecordError(f"{where}: individual id {twice} is recorded twice: the file is "
                              f"damaged; {DAMAGED_HINT}")
    return rows


def _check_sum(rows: np.ndarray, stored: object, where: str) -> tuple[int, int | None]:
    """The rows covered and the CRC of their error texts (None: the table has none). Rows past
    the covered ones are those of a writer killed between its two commits."""
    value = np.asarray(stored)
    if value.shape not in ((2,), (3,)) or value.dtype.kind not in "iu" \
            or not 0 <= value[0] <= len(rows):
        raise RecordError(f"{where}: its checksum attribute is {str(stored)[:40]!r}, not (rows, "
                          f"CRC-32) for up to {len(rows)} rows: the file is damaged; "
                          f"{DAMAGED_HINT}")
    covered, crc = int(value[0]), int(value[1])
    if checksum(rows[:covered]) != crc:
        raise RecordError(f"{where}: rows 0 to {covered - 1} do not match their checksum (a value "
                          f"in them changed after it was written): the file is damaged; "
                          f"{DAMAGED_HINT}")
    return covered, int(value[2]) if len(value) == 3 else None


def repeated(ids: np.ndarray) -> int | None:
    """The smallest id that occurs more than once, or None."""
    values, counts = np.unique(ids, return_counts=True)
    twice = values[counts > 1]
    return int(twice[0]) if len(twice) else None
