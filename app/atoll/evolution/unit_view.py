"""Numeric parameters as one point of the unit cube, and back: CMA-ES's view of a candidate.

The values are each parameter's own ``to_unit`` and ``from_unit``. CMA-ES converts every result
its island learns and every candidate it breeds, so linear floats and ints (most of most spaces)
are converted here in one expression each, their own arithmetic without their method calls;
every other parameter goes through its own methods.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from atoll.space import FloatParam, IntParam, Param

Linear = tuple[float, float, float]
"""A linear float's low, high and high - low."""
Lattice = tuple[int, int, int]
"""A linear int's low, high and number of values."""


def _linear(param: Param) -> Linear | None:
    """The bounds of a float whose unit view is ``(value - low) / (high - low)``: linear, with
    a positive, finite span (None for any other parameter)."""
    if not isinstance(param, FloatParam) or param.log or param.high == param.low:
        return None
    span = param.high - param.low
    return (param.low, param.high, span) if math.isfinite(span) else None


def _lattice(param: Param) -> Lattice | None:
    """The bounds of an int whose unit view is its slice's centre (None for any other)."""
    if not isinstance(param, IntParam) or param.log:
        return None
    return (param.low, param.high, param.high - param.low + 1)


class UnitView:
    """Converts ``params``' values, by name, to and from a vector of their unit positions."""

    def __init__(self, params: Sequence[Param]) -> None:
        self.params = tuple(params)
        self._shortcuts = [(p, p.name, _linear(p), _lattice(p)) for p in self.params]

    def to_unit(self, values: Mapping[str, Any]) -> np.ndarray:
        """Each parameter's ``to_unit`` of its value, in the order of ``params``."""
        found = []
        for p, name, linear, lattice in self._shortcuts:
            value = values[name]
            if linear is not None:
                found.append((float(value) - linear[0]) / linear[2])
            elif lattice is not None and type(value) is int:  # as IntParam: clipped, centred
                low, high, count = lattice
                found.append((min(max(value, low), high) - low + 0.5) / count)
            else:
                found.append(p.to_unit(value))
        return np.array(found)

    def from_unit(self, point: Iterable[float]) -> dict[str, Any]:
        """Each parameter's ``from_unit`` of its coordinate of ``point``, by name."""
        values: dict[str, Any] = {}
        for (p, name, linear, lattice), unit in zip(self._shortcuts, point, strict=True):
            if linear is None and lattice is None:
                values[name] = p.from_unit(unit)
                continue
            # As the parameter's from_unit: the position clamped into [0, 1] (NaN to 0).
            u = 0.0 if math.isnan(unit) else min(max(float(unit), 0.0), 1.0)
            if linear is not None:
                # The weighted mean of the bounds, clipped to them (finite: never NaN).
                first, last, _ = linear
                value = first * (1.0 - u) + last * u
                values[name] = float(first if first > value else last if last < value else value)
            elif lattice is not None:  # the integer whose slice holds it
                low, high, count = lattice
                values[name] = min(max(low + math.floor(u * count), low), high)
        return values
