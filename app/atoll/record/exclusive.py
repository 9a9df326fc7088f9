"""Names that only one process can make: the claim on a run directory and the claims on
paused individuals.

A hard link is the tool where the file system makes them: atomic, refused if the name exists,
never seen half written, also on NFS. Some shared file systems refuse hard links (SMB/CIFS
shares, object-store mounts); there a file created with ``O_EXCL`` takes the link's place, which
is as exclusive on every file system of today (NFS since version 3) but is written after it
exists, so a reader may see it empty for a moment.
"""

from __future__ import annotations

import os
from pathlib import Path


def make_exclusive(target: Path, source: Path, text: str) -> bool:
    """Make ``target`` for this process alone: a hard link to ``source``, or where the file
    system refuses hard links a new file holding ``text``. Whether it is a link.

    FileExistsError if ``target`` exists (another process made it first); FileNotFoundError if
    ``source`` does not; any other OSError (a read-only or full disk) as the system gives it."""
    try:
        os.link(source, target)
        return True
    except (FileExistsError, FileNotFoundError):
        raise
    except OSError:
        pass  # this file system makes no hard links
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(descriptor, "w") as made:
            made.write(text)
        if not source.exists():
            raise FileNotFoundError(f"{source} is gone")
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    return False
