"""Put this directory first on PYTHONPATH and every Python process started with it meets a file
system that refuses hard links, as SMB/CIFS shares and object-store mounts do: ``os.link``
fails with EPERM, as Linux's ``link`` does there."""

import errno
import os


def _refused(source, target, *args, **kwargs):
    raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), os.fspath(source), None,
                          os.fspath(target))


os.link = _refused
