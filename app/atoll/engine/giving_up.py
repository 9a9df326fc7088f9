"""Giving up on an objective that keeps failing: a typo in an objective fails every
evaluation, and a job that went on would spend the run's whole budget on failures."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from atoll.individual import Individual, Status

GAVE_UP = "evaluations keep failing"
"""The stop reason a job that gave up records."""


class FailureWatch:
    """Asks for a stop once ``after`` failed results of this job are known while no result of
    the run has succeeded (``after`` = 0: never)."""

    def __init__(self, after: int, succeeded: bool, stop: Callable[[str], None]) -> None:
        self.after = after
        self.succeeded = succeeded
        self.stop = stop
        self.failed = 0

    def learn(self, ind: Individual) -> None:
        if ind.status == Status.OK:
            self.succeeded = True
        elif ind.status == Status.FAILED:
            self.failed += 1
            if self.after and not self.succeeded and self.failed >= self.after:
                self.stop(GAVE_UP)


def commonest_error(errors: Iterable[str]) -> tuple[str, int, int]:
    """The most frequent error, how often it occurred, and how many errors there were."""
    counts = Counter(e for e in errors if e)
    if not counts:
        return "", 0, 0
    error, times = counts.most_common(1)[0]
    return error, times, sum(counts.values())
