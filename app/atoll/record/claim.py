"""One job per run directory: a claim file taken before anything is written, held for the
whole job, refused to any other job with the holder's name.

The claim is ``RUN_DIR/.atoll-claim``, made by a hard link to a file of the job's own that
already holds its content: atomic, and refused if the name exists, on local file systems and on
the parallel ones jobs run on (the classic lock file of NFS; Lustre, GPFS), where ``flock``
and HDF5's locks may be missing or silently off (where hard links are refused, an exclusive
create takes its place: :mod:`atoll.record.exclusive`). It holds the holder's host, pid, SLURM
job id and start time as JSON. A crash cannot delete it, so the holder refreshes its
modification time every :data:`HEARTBEAT` seconds; a claim whose holder is gone (a dead pid
on this host, or no heartbeat for :data:`STALE_AFTER` seconds) is taken over with a warning. A
job that finds the claim of a job on another host waits until that claim would have gone stale
before it refuses: a job requeued right after its node was lost then continues instead of
failing.

A lease can be lost while its holder lives (a node whose file system hung for a minute): each
heartbeat checks that the claim is still this job's before refreshing it. One taken over by
another job is neither refreshed nor deleted, and the job is told (:meth:`Claim.when_lost`) so
that it stops before two jobs write one run.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from atoll.errors import RecordError
from atoll.record._h5 import os_reason
from atoll.record.exclusive import make_exclusive

log = logging.getLogger(__name__)

CLAIM_FILE = ".atoll-claim"
HEARTBEAT = 10.0
"""Seconds between refreshes of a held claim's modification time."""
STALE_AFTER = 60.0
"""A claim not refreshed for this long belongs to a job that is gone (a crash, a lost node)."""
CLAIM_LOST = "another job took over the run directory"
"""The reason a job whose claim was taken over gives for stopping."""
WRITING = 2.0
"""Seconds to wait for the holder's name in a claim found empty (created, not yet written)."""
CANNOT_WRITE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT})
"""Errors that mean this job cannot write the run directory at all: it goes on without a claim,
and its own first write says what is wrong."""
DYING = 3.0
"""Seconds to wait for a holder on this host that may be being killed, before refusing."""


class Claim:
    """A held claim on a run directory; :meth:`release` gives it up (and removes a run
    directory this claim created, if nothing else was written into it)."""

    def __init__(self, path: Path, text: str, made_dir: bool) -> None:
        self.path = path
        self.text = text
        """The claim's content as this job wrote it: a claim with any other is another job's."""
        self.made_dir = made_dir
        self.lost_to = ""
        """Who holds the run directory now, once this job's claim was taken over."""
        self._on_lost: list[Callable[[], None]] = []
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, daemon=True, name="atoll-claim")
        self._beat.start()

    def when_lost(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from the heartbeat's thread) if this claim is taken over; at
        once if it was already."""
        self._on_lost.append(callback)
        if self.lost_to:
            callback()

    def release(self) -> None:
        self._stop.set()
        self._beat.join()
        if _read(self.path) == self.text:  # never another job's claim
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        if self.made_dir:
            with contextlib.suppress(OSError):
                self.path.parent.rmdir()  # only if empty: never removes what others wrote

    def _heartbeat(self) -> None:
        """Refresh the claim while it is this job's; tell the job once it is not."""
        while not self._stop.wait(HEARTBEAT):
            try:
                found = self.path.read_text()
            except FileNotFoundError:  # deleted by hand: this job takes it again if it can
                with contextlib.suppress(OSError):
                    _create(self.path, self.text)
                found = _read(self.path)
            except OSError:
                continue  # a file system hiccup: try again at the next beat
            if found and found != self.text:
                self.lost_to = _describe(_parsed(found))
                log.warning("%s: another job took over this run directory (%s) while this "
                            "job ran; stopping", self.path.parent, self.lost_to)
                for callback in self._on_lost:
                    callback()
                return
            with contextlib.suppress(OSError):
                os.utime(self.path)


def still_held(run_dir: Path, text: str) -> bool:
    """Whether the run directory's claim is still the one with ``text`` (any rank may ask; a
    missing claim counts as held: its own job takes it again at the next beat)."""
    found = _read(run_dir / CLAIM_FILE)
    return not found or found == text


def claim(run_dir: Path, *, create: bool) -> Claim | None:
    """Take the run directory for this job, or raise a one-line RecordError naming the holder.

    ``create``: make the directory if needed (:meth:`Claim.release` removes it again if the job
    wrote nothing into it). None where there is nothing to claim: a path that is no directory
    (and is not to be created) or a directory that cannot be written; the job's own checks then
    say what is wrong, as they did before claims."""
    if not run_dir.is_dir() and (not create or run_dir.exists()):
        return None
    made = not run_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    path = run_dir / CLAIM_FILE
    text = _holder()
    try:
        try:
            _create(path, text)
        except FileExistsError:
            _take_when_gone(path, text)
    except RecordError:
        _remove_made(run_dir, made)
        raise
    except OSError as exc:
        _remove_made(run_dir, made)
        if exc.errno in CANNOT_WRITE:  # read-only, full: the job's own checks report it
            return None
        # Never run unclaimed for a hiccup: a second job may hold the directory.
        raise RecordError(f"{run_dir}: its claim {path} could not be made or judged "
                          f"({os_reason(exc)}); try again, "
                          "or check this file system") from None
    return Claim(path, text, made)


def _take_when_gone(path: Path, text: str) -> None:
    """Take the claim another job made, once that job is certainly gone; else a one-line
    RecordError naming it."""
    seen = _written(path)
    holder = _parsed(seen)
    if not _wait_until_gone(path, holder):
        raise RecordError(refusal(path.parent, _describe(holder)))
    _take_over(path, seen, holder)
    try:
        _create(path, text)
    except FileExistsError:  # another job took it over first
        raise RecordError(f"{path.parent}: another job took over this run directory at the "
                          "same moment; wait for it to end") from None


def _remove_made(run_dir: Path, made: bool) -> None:
    """Remove the run directory this job made for its claim (only if still empty)."""
    if made:
        with contextlib.suppress(OSError):
            run_dir.rmdir()


def _holder() -> str:
    """This job as a claim names it."""
    return json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                       "slurm_job": os.environ.get("SLURM_JOB_ID", ""), "since": time.time()})


def _create(path: Path, text: str) -> None:
    """Write the holder to a file of our own, then link it to the claim's name: the link is
    atomic and fails if the claim exists (also on NFS), and a claim is never seen half
    written (where links are refused, an exclusive create, which may be seen empty for a
    moment). FileExistsError if another job holds it."""
    mine = path.with_name(f"{path.name}.{socket.gethostname()}.{os.getpid()}")
    try:
        mine.write_text(text)
        make_exclusive(path, mine, text)
    finally:
        mine.unlink(missing_ok=True)


def _take_over(path: Path, seen: str, holder: dict[str, Any]) -> None:
    """Remove the claim of a job that is gone, unless another job took it over first.

    Two jobs may judge the same claim gone at once. The claim is moved aside (of two renames
    of one name, one wins) and must be the one judged: a fresh claim of a job that took over
    first is put back, and this job refused."""
    aside = path.with_name(f"{path.name}.gone.{socket.gethostname()}.{os.getpid()}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return  # given up normally, or moved aside by another job: whoever creates it wins
    try:
        found = _read(aside)
        if found != seen:
            with contextlib.suppress(FileExistsError):
                make_exclusive(path, aside, found)
            raise RecordError(f"{path.parent}: another job took over this run directory at "
                              "the same moment; wait for it to end")
        log.warning("%s: taking over the claim of a job that is gone (%s)", path.parent,
                    _describe(holder))
    finally:
        aside.unlink(missing_ok=True)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _written(path: Path) -> str:
    """The claim's content, once its holder has written it: where hard links are refused, a
    claim exists empty for a moment before its holder's name is in it."""
    deadline = time.monotonic() + WRITING
    while not (seen := _read(path)) and time.monotonic() < deadline and path.exists():
        time.sleep(0.05)
    return seen


def _parsed(text: str) -> dict[str, Any]:
    try:
        found = json.loads(text)
        return found if isinstance(found, dict) else {}
    except ValueError:
        return {}  # damaged: judged by its age alone


def _wait_until_gone(path: Path, holder: dict[str, Any]) -> bool:
    """Whether the holder is gone, waiting as long as it takes to know: a few seconds for a
    process on this host that is being killed, and for one on another host (a requeued job
    after its node was lost) until its heartbeat would have gone stale."""
    here = holder.get("host") == socket.gethostname()
    patience = DYING if here else STALE_AFTER + 2 * HEARTBEAT
    deadline = time.monotonic() + patience
    told = False
    while not _gone(path, holder):
        if time.monotonic() >= deadline:
            return False
        if not here and not told:
            log.warning("%s: held by %s; waiting up to %.0f s in case that job is gone",
                        path.parent, _describe(holder), patience)
            told = True
        time.sleep(0.2 if here else HEARTBEAT / 2)
    return True


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
        return not running(pid)
    return False


def holder_of(run_dir: Path) -> tuple[str, bool] | None:
    """Who holds ``run_dir``, if a job that is not gone does: its description and whether it
    runs on this host (a search refuses at once; one on another host is waited for until its
    claim would be stale). For ``atoll doctor``, which takes no claim."""
    path = run_dir / CLAIM_FILE
    if not path.exists():
        return None
    holder = _parsed(_read(path))
    if _gone(path, holder):
        return None
    return _describe(holder), holder.get("host") == socket.gethostname()


def refusal(run_dir: Path, holder: str) -> str:
    """The line a search prints when a job holds ``run_dir``."""
    path = run_dir / CLAIM_FILE
    return (f"{run_dir}: a job holds this run directory ({holder}); wait for it to end, or "
            f"if it is gone delete {path} (a claim unrefreshed for {STALE_AFTER:g} s is "
            "taken over by itself)")


def held(run_dir: Path) -> bool:
    """Whether a job that is not gone holds ``run_dir`` (a watcher's test for a job that was
    killed before it could record its end)."""
    path = run_dir / CLAIM_FILE
    return path.exists() and not _gone(path, _parsed(_read(path)))


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def _describe(holder: dict[str, Any]) -> str:
    if not holder:
        return "no holder named in it: empty or damaged"
    text = f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}"
    if holder.get("slurm_job"):
        text += f", SLURM job {holder['slurm_job']}"
    since = holder.get("since")
    if isinstance(since, (int, float)):
        text += f", since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}"
    return text
