"""One job per run directory: a claim file taken before anything is written, held for the
whole job, refused to any other job with the holder's name.

The claim is ``RUN_DIR/.atoll-claim``, created with ``O_CREAT | O_EXCL``: atomic on local file
systems and on the parallel ones jobs run on (NFS v3 and later, Lustre, GPFS), where ``flock``
and HDF5's locks may be missing or silently off. It holds the holder's host, pid, SLURM job id
and start time as JSON. A crash cannot delete it, so the holder refreshes its modification
time every :data:`HEARTBEAT` seconds; a claim whose holder is gone (a dead pid on this host, or
no heartbeat for :data:`STALE_AFTER` seconds) is taken over with a warning.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atoll.errors import RecordError
from atoll.record._h5 import write_error

log = logging.getLogger(__name__)

CLAIM_FILE = ".atoll-claim"
HEARTBEAT = 10.0
"""Seconds between refreshes of a held claim's modification time."""
STALE_AFTER = 60.0
"""A claim not refreshed for this long belongs to a job that is gone (a crash, a lost node)."""


@dataclass
class Claim:
    """A held claim on a run directory; :meth:`release` gives it up (and removes a run
    directory this claim created, if nothing else was written into it)."""

    path: Path
    made_dir: bool
    _stop: threading.Event
    _beat: threading.Thread

    def release(self) -> None:
        self._stop.set()
        self._beat.join()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        if self.made_dir:
            with contextlib.suppress(OSError):
                self.path.parent.rmdir()  # only if empty: never removes what others wrote


def claim(run_dir: Path) -> Claim:
    """Take the run directory for this job, or raise a one-line RecordError naming the holder.

    Creates the directory if needed (and :meth:`Claim.release` removes it again if the job
    wrote nothing into it)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RecordError(f"{run_dir}: is a file, not a directory; choose an empty or new "
                          "directory for the run")
    made = not run_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(run_dir, exc) from exc
    path = run_dir / CLAIM_FILE
    try:
        _create(path)
    except FileExistsError:
        holder = _holder(path)
        if not _gone(path, holder):
            if made:
                with contextlib.suppress(OSError):
                    run_dir.rmdir()
            raise RecordError(
                f"{run_dir}: a job holds this run directory ({_describe(holder)}); wait for "
                f"it to end, or if it is gone delete {path} (a claim unrefreshed for "
                f"{STALE_AFTER:g} s is taken over by itself)") from None
        log.warning("%s: taking over the claim of a job that is gone (%s)", run_dir,
                    _describe(holder))
        path.unlink(missing_ok=True)
        try:
            _create(path)
        except FileExistsError:  # another job took it over first
            raise RecordError(f"{run_dir}: another job took over this run directory at the "
                              "same moment; wait for it to end") from None
    except OSError as exc:
        raise write_error(run_dir, exc) from exc
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(path, stop), daemon=True,
                            name="atoll-claim")
    beat.start()
    return Claim(path, made, stop, beat)


def _create(path: Path) -> None:
    holder = {"host": socket.gethostname(), "pid": os.getpid(),
              "slurm_job": os.environ.get("SLURM_JOB_ID", ""), "since": time.time()}
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    with os.fdopen(fd, "w") as f:
        json.dump(holder, f)


def _holder(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text())
        return found if isinstance(found, dict) else {}
    except (OSError, ValueError):
        return {}  # being written right now, or damaged: judged by its age alone


def _gone(path: Path, holder: dict[str, Any]) -> bool:
    """Whether the holder has certainly ended: a dead process on this host, or a claim that
    was not refreshed for STALE_AFTER seconds."""
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return True
    if age > STALE_AFTER:
        return True
    pid = holder.get("pid")
    if holder.get("host") == socket.gethostname() and isinstance(pid, int):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
    return False


def _describe(holder: dict[str, Any]) -> str:
    if not holder:
        return "holder unknown"
    text = f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}"
    if holder.get("slurm_job"):
        text += f", SLURM job {holder['slurm_job']}"
    since = holder.get("since")
    if isinstance(since, (int, float)):
        text += f", since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}"
    return text


def _heartbeat(path: Path, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT):
        with contextlib.suppress(OSError):
            os.utime(path)
