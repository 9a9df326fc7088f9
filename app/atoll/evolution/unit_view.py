"""Numeric parameters as one point of the unit cube, and back: CMA-ES's view of a candidate.

The values are each parameter's own ``to_unit`` and ``from_unit``. CMA-ES converts every result
its island learns and every candidate it breeds, so a linear float (most of most spaces) is
converted here in one expression, FloatParam's arithmetic without its method calls; every other
parameter goes through its own methods.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from atoll.space import FloatParam, Param

Linear = tuple[float, float, float]
"""A linear float's low, high and high - low."""


def _linear(param: Param) -> Linear | None:
    """The bounds of a float whose unit view is ``(value - low) / (high - low)``: linear, with
    a positive, finite span (None for any other parameter)."""
    if not isinstance(param, FloatParam) or param.log or param.high == param.low:
        return None
    span = param.high - param.low
    return (param.low, param.high, span) if math.isfinite(span) else None


class UnitView:
    """Converts ``params``' values, by name, to and from a vector of their unit positions."""

    def __init__(self, params: Sequence[Param]) -> None:
        self.params = tuple(params)
        self._linear = [_linear(p) for p in self.params]

    def to_unit(self, values: Mapping[str, Any]) -> np.ndarray:
        """Each parameter's ``to_unit`` of its value, in the order of ``params``."""
        return np.array([p.to_unit(values[p.name]) if b is None
                         else (float(values[p.name]) - b[0]) / b[2]
                         for p, b in zip(self.params, self._linear, strict=True)])

    def from_unit(self, point: Iterable[float]) -> dict[str, Any]:
        """Each parameter's ``from_unit`` of its coordinate of ``point``, by name."""
        values: dict[str, Any] = {}
        for p, b, unit in zip(self.params, self._linear, point, strict=True):
            if b is None:
                values[p.name] = p.from_unit(unit)
                continue
            low, high, _ = b
            # As FloatParam.from_unit: the position clamped into [0, 1] (NaN to 0), the weighted
            # mean of the bounds, clipped to them (finite bounds: it is never NaN).
            u = 0.0 if math.isnan(unit) else min(max(float(unit), 0.0), 1.0)
            value = low * (1.0 - u) + high * u
            values[p.name] = float(low if low > value else high if high < value else value)
        return values
