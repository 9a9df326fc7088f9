"""``search.eval_timeout``: the alarm that cuts an evaluation short, and holding it back
where ranks act together.

SIGALRM interrupts Python code and sleeps, but not a C call that does not return (a blocking
MPI call, a long native kernel): such runaways end only when the call returns.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from types import FrameType


class EvaluationTimeout(TimeoutError):
    """The evaluation ran past ``search.eval_timeout``."""


def time_limit(seconds: float) -> AbstractContextManager[None]:
    """Raise :class:`EvaluationTimeout` inside the block after ``seconds`` (0: no limit).

    Without a limit (the usual case) the block runs under a no-op context, cheap enough for
    every evaluation.
    """
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        return nullcontext()
    return _alarm(seconds)


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: FrameType | None) -> None:
        raise EvaluationTimeout(f"evaluation exceeded search.eval_timeout = {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class HeldAlarm:
    """What happened to the alarm while it was held."""

    fired: bool = False
    taken: bool = False
    """Set by the holder that handled the expiry itself: it is then not raised afterwards."""


@contextmanager
def alarm_held() -> Iterator[HeldAlarm]:
    """Hold the evaluation's alarm back in the block, where a rank cut short would leave its
    partners out of step; it fires at the end of the block unless the holder took it or the
    block raised (the evaluation fails with that error then).

    The Python handler is swapped rather than the signal masked: MPI's own threads would take
    a masked process signal, and Python runs the handler in the main thread all the same.
    """
    held = HeldAlarm()
    if threading.current_thread() is not threading.main_thread():
        yield held
        return

    def note(signum: int, frame: FrameType | None) -> None:
        held.fired = True

    previous = signal.signal(signal.SIGALRM, note)
    try:
        yield held
    finally:
        signal.signal(signal.SIGALRM, previous)
    if held.fired and not held.taken and callable(previous):  # the block ended well: fire now
        previous(signal.SIGALRM, None)
