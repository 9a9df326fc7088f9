"""A daemon thread that calls a function every so often until stopped.

The worker log needs it because the loop's thread may be inside an evaluation that reports
nothing for hours: only another thread can write the rows that wait meanwhile.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any


class Ticker:
    """Call ``tick``, a bound method, every ``period`` seconds on a daemon thread until
    :meth:`stop`, or until its object is gone: the thread does not keep it alive (an object
    never closed is still collected, and its files closed)."""

    def __init__(self, tick: Callable[[], Any], period: float, name: str) -> None:
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(weakref.WeakMethod(tick),
                                                                period), name=name, daemon=True)
        self._thread.start()

    def _run(self, tick: weakref.WeakMethod[Callable[[], Any]], period: float) -> None:
        while not self._stopped.wait(period):
            method = tick()
            if method is None:
                return
            method()
            del method

    def stop(self) -> None:
        """Stop ticking; returns once a tick under way has ended (from any other thread)."""
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
