"""Value checkers: (value, dotted key) -> the validated value, or one ConfigError line that
names the key, the value as written and what is allowed."""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from typing import Any

from atoll.errors import ConfigError
from atoll.space import INT64_MAX

Check = Callable[[Any, str], Any]


def show(value: Any) -> str:
    """A value as the user wrote it, on one line and not too long."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


MAX_EVALUATIONS = 10**12
"""The largest budget a run may have: a typo such as ``generations = 4611686018427387904`` is
refused. A job whose block of new ids (:func:`atoll.job.plan.id_block`) would pass int64 is
refused when it is planned."""
MAX_COUNT = 10**6
"""The largest islands, ranks per worker, population, migrants, tournament or kept models."""
MAX_SECONDS = 1e7
"""The longest wall time, evaluation timeout, flush interval or process-group timeout: about
116 days, within what the operating system's timers accept."""


def integer(minimum: int, maximum: int = INT64_MAX) -> Check:
    def check(value: Any, key: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(f"{key}: expected an integer >= {minimum}, got {show(value)}")
        if value > maximum:
            raise ConfigError(f"{key}: expected an integer <= {maximum:,}, got {value:,}")
        return value

    return check


def number(minimum: float, *, strict: bool, maximum: float = math.inf) -> Check:
    """A finite real up to ``maximum``; ``strict`` excludes the minimum itself."""
    allowed = f"a number {'>' if strict else '>='} {minimum:g}"
    if math.isfinite(maximum):
        allowed += f" and at most {maximum:g} (seconds: about {maximum / 86400:.0f} days)"

    def check(value: Any, key: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected {allowed}, got {show(value)}")
        try:
            real = float(value)
        except OverflowError:
            raise ConfigError(f"{key}: expected {allowed}, got {value} (too large)") from None
        if not math.isfinite(real) or real < minimum or (strict and real == minimum) \
                or real > maximum:
            raise ConfigError(f"{key}: expected {allowed}, got {show(value)}")
        return real

    return check


def seconds(*, strict: bool) -> Check:
    return number(0.0, strict=strict, maximum=MAX_SECONDS)


def probability(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not 0.0 <= value <= 1.0:
        raise ConfigError(f"{key}: expected a probability in [0, 1], got {show(value)}")
    return float(value)


def boolean(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{key}: expected true or false, got {show(value)}")
    return value


def names(value: Any, key: str) -> tuple[str, ...]:
    """A list of parameter names (checked against the space once it is known)."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{key}: expected a list of parameter names, got {show(value)}")
    return tuple(value)


def open_unit(maximum: float) -> Check:
    """A number in (0, ``maximum``]."""
    def check(value: Any, key: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not 0.0 < value <= maximum:
            raise ConfigError(f"{key}: expected a number > 0 and <= {maximum:g}, "
                              f"got {show(value)}")
        return float(value)

    return check


def string_value(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{key}: expected a string, got {show(value)}")
    return value


def one_of(*options: str) -> Check:
    def check(value: Any, key: str) -> str:
        if not isinstance(value, str) or value not in options:
            close = difflib.get_close_matches(value, options, n=1) if isinstance(value, str) \
                else []
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{key}: expected one of {', '.join(map(repr, options))}, "
                              f"got {show(value)}{hint}")
        return value

    return check


def population_size(value: Any, key: str) -> int:
    """0 means "2 x the island's workers"; otherwise crossover needs at least two parents."""
    size = integer(0, MAX_COUNT)(value, key)
    if size == 1:
        raise ConfigError(f"{key}: expected 0 (2 x the workers of an island) or >= 2, got 1")
    return size


