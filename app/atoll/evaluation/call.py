"""Running one objective call and turning whatever happens into a loss or a failure record."""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

from atoll.errors import described
from atoll.evaluation.alarm import time_limit
from atoll.evaluation.context import Context
from atoll.individual import Status

log = logging.getLogger(__name__)

Objective = Callable[[Mapping[str, Any], Context], Any]

ERROR_CHARS = 1000
"""Characters of an error a failed individual records (a multi-rank worker's, twice as many).
results.h5 gives every row's error as much room as the longest one's: without a bound, one
error of megabytes (a progress bar on stderr is one long line) would cost that much per row."""
CUT = " [cut: the whole error is in the logs]"


def cut(text: str, limit: int = ERROR_CHARS) -> str:
    """``text``, or its start and a note saying so if it is longer than ``limit``."""
    return text if len(text) <= limit else text[: limit - len(CUT)] + CUT


def evaluate(objective: Objective, params: Mapping[str, Any], ctx: Context,
             timeout: float = 0.0) -> tuple[float, Status, str]:
    """Call the objective; failures are data: (nan, FAILED, "Type: first line of message").

    Whatever the objective raises is a failed individual, SystemExit and KeyboardInterrupt too
    (a user's ``sys.exit`` or ``raise KeyboardInterrupt`` must not end the job and lose its
    rows; a real Ctrl-C reaches the job as a stop request, not as KeyboardInterrupt)."""
    try:
        with time_limit(timeout):
            value = objective(params, ctx)
    except BaseException as exc:  # noqa: BLE001 - whatever the objective does is its result
        # Every rank of a worker fails alike: the leader warns, the others' logs keep theirs.
        log.log(logging.WARNING if ctx.is_leader else logging.INFO, "individual %d failed",
                ctx.individual_id, exc_info=True)
        return math.nan, Status.FAILED, cut(described(exc))
    if type(value) is float:  # the common case: nothing to check but finiteness
        loss = value
    else:
        # Real numbers, numpy scalars and 0-d tensors (via __float__) count; bools and strings
        # not.
        number_like = isinstance(value, numbers.Real) or hasattr(value, "__float__")
        if isinstance(value, bool) or not number_like:
            return math.nan, Status.FAILED, \
                f"TypeError: objective returned {type(value).__name__}, not a number"
        try:
            loss = float(value)
        except (TypeError, ValueError, OverflowError) as exc:  # e.g. 10**400: no float
            return math.nan, Status.FAILED, \
                f"{type(exc).__name__}: objective returned an unusable value ({exc})"
    if not math.isfinite(loss):
        return math.nan, Status.FAILED, f"ValueError: objective returned a non-finite loss ({loss})"
    return loss, Status.OK, ""
