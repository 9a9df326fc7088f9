"""Error texts of a worker file: one byte stream beside the individuals table.

A worker file appends rows while its job runs. Kept as variable-length strings, its error
texts went to HDF5's global heap, which nothing checksums (a changed byte was read as it was)
and whose damaged headers can send HDF5 into an endless loop. Instead the texts are UTF-8
bytes, one after another in row order, in the uint8 dataset ``error_text``; a row's ``error``
column holds the length of its text, so its text starts where the texts of the rows before it
end. The individuals table's commit covers them: the texts are written (and flushed) with the
rows, before the ``rows`` attribute that makes a reader see them, and the ``checksum``
attribute holds a third number, the CRC-32 of the texts of the rows it covers. Each text is
kept whole, whatever its length (the evaluation bounds it, and says so when it cuts one:
:data:`atoll.evaluation.call.ERROR_CHARS`).
"""

from __future__ import annotations

import zlib

import h5py
import numpy as np

from atoll.errors import RecordError

STREAM = "error_text"
CHUNK = 16 * 1024
"""Bytes per chunk of the stream: most runs store few or no error texts."""

DOC = ("error texts of the individuals table, UTF-8, one after another in row order; a row's "
       "'error' column is its text's length in bytes")


def encode(text: str) -> bytes:
    """A text as UTF-8; characters UTF-8 cannot hold (lone surrogates, as in some OS error
    messages) as backslash escapes, so nothing is dropped."""
    return text.encode("utf-8", "backslashreplace")


def create(f: h5py.Group) -> h5py.Dataset:
    """The empty stream, chunked and resizable."""
    return f.create_dataset(STREAM, shape=(0,), maxshape=(None,), chunks=(CHUNK,),
                            dtype=np.uint8)


class Stream:
    """Appends texts after the committed ones through h5py's low-level API, as the tables do.

    ``end`` and ``crc``: the length and CRC-32 of the texts of the committed rows. A write
    starts there, so a flush retried after an error overwrites its own texts."""

    def __init__(self, ds: h5py.Dataset, end: int, crc: int) -> None:
        self._id = ds.id
        self.end, self.crc = end, crc
        self.written_end, self.written_crc = end, crc

    def write(self, data: bytes) -> None:
        """Write ``data`` after the committed texts (nothing to write leaves the file alone)."""
        self.written_end, self.written_crc = self.end, self.crc
        if not data:
            return
        stop = self.end + len(data)
        self._id.set_extent((stop,))
        target = self._id.get_space()
        target.select_hyperslab((self.end,), (len(data),))
        self._id.write(h5py.h5s.create_simple((len(data),)), target,
                       np.frombuffer(data, dtype=np.uint8))
        self.written_end, self.written_crc = stop, zlib.crc32(data, self.crc)

    def commit(self) -> None:
        self.end, self.crc = self.written_end, self.written_crc


def attach(rows: np.ndarray, stream: h5py.Dataset, covered: int, crc: int | None,
           where: str, hint: str) -> np.ndarray:
    """``rows`` of a worker file's individuals table with ``error`` as text, read from
    ``stream`` and checked: the texts of the first ``covered`` rows must have CRC-32 ``crc``."""
    lengths = rows["error"].astype(np.int64)
    ends = np.cumsum(lengths)
    need = int(ends[-1]) if len(ends) else 0
    if need > stream.shape[0] and stream.file.swmr_mode:
        stream.refresh()  # grown by a live writer since this reader first met it
    if len(lengths) and int(lengths.min()) < 0 or need > stream.shape[0]:
        raise RecordError(f"{where}: its rows' error texts take {need} bytes, but {STREAM!r} "
                          f"holds {stream.shape[0]}: the file is damaged; {hint}")
    data = stream[:need].tobytes() if need else b""
    checked = int(ends[covered - 1]) if covered else 0
    if crc is not None and zlib.crc32(data[:checked]) != crc:
        raise RecordError(f"{where}: the error texts of rows 0 to {covered - 1} do not match "
                          "their checksum (a text changed after it was written): the file is "
                          f"damaged; {hint}")
    starts = (ends - lengths).tolist()
    texts = [data[a:b].decode("utf-8", "replace") if b > a else ""
             for a, b in zip(starts, ends.tolist(), strict=True)]
    names = rows.dtype.names or ()
    out = np.empty(len(rows), dtype=[
        (name, h5py.string_dtype() if name == "error" else rows.dtype[name]) for name in names])
    for name in names:
        out[name] = texts if name == "error" else rows[name]
    return out
