"""Running one objective call and turning whatever happens into a loss or a failure record."""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

from atoll.context import Context
from atoll.individual import Status

log = logging.getLogger(__name__)

Objective = Callable[[Mapping[str, Any], Context], Any]


def evaluate(objective: Objective, params: Mapping[str, Any],
             ctx: Context) -> tuple[float, Status, str]:
    """Call the objective; failures are data: (nan, FAILED, "Type: first line of message")."""
    try:
        value = objective(params, ctx)
    except Exception as exc:  # noqa: BLE001 - any user error becomes a failed individual
        log.warning("individual %d failed", ctx.individual_id, exc_info=True)
        first_line = (str(exc).splitlines() or [""])[0]
        return math.nan, Status.FAILED, f"{type(exc).__name__}: {first_line}"[:1000]
    # Real numbers, numpy scalars and 0-d tensors (via __float__) count; bools and strings not.
    number_like = isinstance(value, numbers.Real) or hasattr(value, "__float__")
    if isinstance(value, bool) or not number_like:
        return math.nan, Status.FAILED, \
            f"TypeError: objective returned {type(value).__name__}, not a number"
    try:
        loss = float(value)
    except (TypeError, ValueError) as exc:
        return math.nan, Status.FAILED, f"TypeError: objective returned an unusable value ({exc})"
    if not math.isfinite(loss):
        return math.nan, Status.FAILED, f"ValueError: objective returned a non-finite loss ({loss})"
    return loss, Status.OK, ""
