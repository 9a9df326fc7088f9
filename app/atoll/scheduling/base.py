"""The scheduler protocol: a verdict on every reported epoch, and news of every completion.

A scheduler decides from per-epoch curves whether an evaluation goes on (Ray Tune's
``on_trial_result`` / ``on_trial_complete``, Optuna's pruners). It is pure: no MPI, no files.
Its wiring into a job (restoring it from the record, hearing the island's curves,
agreeing on a verdict across a worker's ranks) is :mod:`atoll.scheduling.worker`'s, so a new
rule is one small class here and a name in ``pruning.rule``.

Verdicts are continue, stop, or pause (successive halving's promotion form,
:mod:`atoll.scheduling.asha`): the evaluation ends now with its checkpoint kept, and its island
may continue it later.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum
from typing import Protocol


class Verdict(IntEnum):
    CONTINUE = 0
    STOP = 1  # recorded as pruned, with the value of its last reported epoch
    PAUSE = 2  # recorded as paused (its checkpoint kept), or as pruned if it kept none


Curve = Iterable[tuple[int, float]]
"""(epoch, metric) pairs of one evaluation; NaN where the metric was not reported."""


class Scheduler(Protocol):
    def learn(self, curve: Curve) -> None:
        """A curve, or part of one, from elsewhere on the island (a partner, the record): a
        completed evaluation's for the median rule, any rung values for successive halving."""
        ...

    def on_report(self, individual: int, epoch: int, value: float) -> Verdict:
        """A running evaluation of this worker reported ``value`` at ``epoch``."""
        ...

    def on_complete(self, individual: int, completed: bool) -> None:
        """This worker's evaluation ended: completed (ok), or not (pruned, failed, stopped)."""
        ...
