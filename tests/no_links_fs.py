"""A real file system that refuses hard links, as SMB/CIFS shares and object-store mounts do:
a FUSE file system passing every other call through to a folder.

Run as ``python no_links_fs.py FOLDER MOUNTPOINT``; it serves until unmounted. The tests mount
it with :func:`conftest.no_hard_links` and run Atoll's processes on it unchanged.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

import mfusepy as fuse

STAT_FIELDS = ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid", "st_atime_ns",
               "st_mtime_ns", "st_ctime_ns")
STATVFS_FIELDS = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files",
                  "f_frsize", "f_namemax", "f_flag")


class NoLinks(fuse.Operations):  # type: ignore[misc]
    """``FOLDER``'s files under the mount point; ``link`` fails with EPERM, as Linux's
    ``link`` does on a file system without hard links."""

    use_ns = True

    def __init__(self, folder: str) -> None:
        self.folder = os.path.realpath(folder)

    def _real(self, path: str) -> str:
        return os.path.join(self.folder, path.lstrip("/"))

    def link(self, target: str, source: str) -> None:
        raise fuse.FuseOSError(errno.EPERM)

    def getattr(self, path: str, fh: Any = None) -> dict[str, int]:
        found = os.lstat(self._real(path))
        stat = {name: getattr(found, name) for name in STAT_FIELDS}
        return {name.removesuffix("_ns"): value for name, value in stat.items()}

    def readdir(self, path: str, fh: Any) -> list[str]:
        return [".", "..", *os.listdir(self._real(path))]

    def access(self, path: str, mode: int) -> None:
        if not os.access(self._real(path), mode):
            raise fuse.FuseOSError(errno.EACCES)

    def open(self, path: str, flags: int) -> int:
        return os.open(self._real(path), flags)

    def create(self, path: str, mode: int, flags: int) -> int:
        # The caller's flags, O_EXCL with them: two processes creating one name at once are
        # refused but one, as on the file systems this stands for.
        return os.open(self._real(path), flags | os.O_CREAT, mode)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        return os.pwrite(fh, data, offset)

    def truncate(self, path: str, length: int, fh: Any = None) -> None:
        os.truncate(self._real(path), length)

    def flush(self, path: str, fh: int) -> None:
        return None

    def release(self, path: str, fh: int) -> None:
        os.close(fh)

    def fsync(self, path: str, datasync: int, fh: int) -> None:
        os.fsync(fh)

    def unlink(self, path: str) -> None:
        os.unlink(self._real(path))

    def rename(self, old: str, new: str) -> None:
        os.rename(self._real(old), self._real(new))

    def mkdir(self, path: str, mode: int) -> None:
        os.mkdir(self._real(path), mode)

    def rmdir(self, path: str) -> None:
        os.rmdir(self._real(path))

    def chmod(self, path: str, mode: int) -> None:
        os.chmod(self._real(path), mode)

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> None:
        os.utime(self._real(path), ns=times)

    def statfs(self, path: str) -> dict[str, int]:
        found = os.statvfs(self._real(path))
        return {name: getattr(found, name) for name in STATVFS_FIELDS}


if __name__ == "__main__":
    fuse.FUSE(NoLinks(sys.argv[1]), sys.argv[2], foreground=True)
