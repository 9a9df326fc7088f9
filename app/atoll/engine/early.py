"""Stop signals that arrive when a job cannot act on them: while Python starts, the config is
read and MPI comes up, and again once the job has stopped and the process exits. SLURM and users
may send one at any moment, and repeat it; without a handler it would kill the rank (exit 138
for SIGUSR1). Caught here from the first moment of a search or resume, and turned into a stop
request when the job's own handlers take over; ignored from the job's end on."""

from __future__ import annotations

import signal
from types import FrameType

SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP)
"""What stops a job: SIGTERM and SIGUSR1 (SLURM before a time limit), SIGINT (Ctrl-C), SIGHUP
(its terminal closed), unless started under ``nohup``."""

_caught: list[int] = []
_stopping: tuple[signal.Signals, ...] = ()


def stop_signals() -> tuple[signal.Signals, ...]:
    """The stop signals of this process: SIGHUP only if it was not ignored when the process
    started (``nohup``: the job is to outlive its terminal). Fixed at the first call."""
    global _stopping
    if not _stopping:
        _stopping = tuple(sig for sig in SIGNALS if sig != signal.SIGHUP
                          or signal.getsignal(sig) != signal.SIG_IGN)
    return _stopping


def catch_early() -> None:
    """Remember the stop signals from now on (main thread only)."""
    for sig in stop_signals():
        signal.signal(sig, _remember)


def _remember(signum: int, frame: FrameType | None) -> None:
    _caught.append(signum)


def ignore_from_now() -> None:
    """Ignore the stop signals until the process exits: the job has saved and set its exit
    code. A Python handler would not do: the interpreter resets those to the default while it
    shuts down, and a signal then would kill the rank."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def caught() -> str:
    """The name of the first stop signal caught early, or "" if none."""
    return signal.Signals(_caught[0]).name if _caught else ""
