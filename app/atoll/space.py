"""The search space: typed parameters, sampling, clipping and the unit-interval view operators use.

Operators ask a :class:`Param` to sample, clip, or move a value through ``to_unit``/``from_unit``
(a position in [0, 1], log-aware for log-scale floats) rather than branch on its type. Where a
type's layout matters (the record's columns, the wire format, CMA-ES's integer lattices), those
modules look at the parameter's class.
"""

from __future__ import annotations

import difflib
import json
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from atoll.errors import ConfigError

Params = dict[str, Any]
"""One candidate: parameter name -> value (float, int, or a categorical/ordinal choice)."""

Choice = str | int | float | bool

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""Integer bounds must fit a 64-bit integer: the HDF5 columns and the wire format use it."""

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def key_path(prefix: str, key: str) -> str:
    """``prefix.key`` as TOML spells it; a key that is not bare is quoted, so errors stay on one
    line whatever the key holds."""
    shown = key if _BARE_KEY.fullmatch(key) else json.dumps(key)
    return f"{prefix}.{shown}" if prefix else shown


def _unit(unit: float) -> float:
    """Clamp a unit position into [0, 1]; NaN (from a degenerate operator) maps to 0."""
    return 0.0 if math.isnan(unit) else min(max(float(unit), 0.0), 1.0)


@dataclass(frozen=True)
class FloatParam:
    """A real number in [low, high], sampled uniformly on a linear or a log scale."""

    name: str
    low: float
    high: float
    log: bool = False
    kind: ClassVar[str] = "float"

    def __post_init__(self) -> None:
        key = key_path("space", self.name)
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ConfigError(f"{key}: bounds must be finite, got low={self.low}, "
                              f"high={self.high}")
        if self.low > self.high:
            raise ConfigError(f"{key}: low={self.low} is above high={self.high}; "
                              "swap the bounds")
        if self.log and self.low <= 0:
            raise ConfigError(f"{key}: log scale needs low > 0, got low={self.low}; "
                              "use a positive lower bound or log = false")

    def clip(self, value: Any) -> float:
        value = float(value)
        if math.isnan(value):
            return float(self.low)
        return float(min(max(value, self.low), self.high))

    def to_unit(self, value: Any) -> float:
        if self.high == self.low:
            return 0.0
        if self.log:
            lo, hi = math.log(self.low), math.log(self.high)
            if hi == lo:  # distinct bounds whose logs round to the same float
                return 0.0
            return (math.log(self.clip(value)) - lo) / (hi - lo)
        span = self.high - self.low
        if math.isfinite(span):
            return (float(value) - self.low) / span
        # Halved: a span wider than the largest float (e.g. +-1e308) would overflow to inf.
        return (float(value) / 2 - self.low / 2) / (self.high / 2 - self.low / 2)

    def from_unit(self, unit: float) -> float:
        unit = _unit(unit)
        if self.log:
            lo, hi = math.log(self.low), math.log(self.high)
            try:
                return self.clip(math.exp(lo + unit * (hi - lo)))
            except OverflowError:  # rounding past the largest float, near a huge high bound
                return float(self.high)
        # A weighted mean, not low + unit * (high - low): exact at both ends, no overflow.
        return self.clip(self.low * (1.0 - unit) + self.high * unit)

    def sample(self, rng: random.Random) -> float:
        return self.from_unit(rng.random())

    def contains(self, value: Any) -> bool:
        return isinstance(value, (int, float, np.integer, np.floating)) and \
            not isinstance(value, bool) and bool(self.low <= value <= self.high)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "low": self.low, "high": self.high, "log": self.log}


@dataclass(frozen=True)
class IntParam:
    """An integer in [low, high], both inclusive, on a linear or a log scale.

    On a log scale (``low >= 1``) each integer owns the stretch of log space from its value
    minus a half to its value plus a half, as in Optuna's log-scaled integers: 1 and 2 are as
    likely as 100 and 200 together, and a mutation moves small values by small steps."""

    name: str
    low: int
    high: int
    log: bool = False
    kind: ClassVar[str] = "int"

    def __post_init__(self) -> None:
        key = key_path("space", self.name)
        for bound in (self.low, self.high):
            if not INT64_MIN <= bound <= INT64_MAX:
                raise ConfigError(f"{key}: bound {bound} does not fit a 64-bit integer; "
                                  f"use a value in [{INT64_MIN}, {INT64_MAX}]")
        if self.low > self.high:
            raise ConfigError(f"{key}: low={self.low} is above high={self.high}; "
                              "swap the bounds")
        if self.log and self.low < 1:
            raise ConfigError(f"{key}: log scale needs low >= 1 for an int, got low={self.low}; "
                              "use a lower bound of at least 1 or log = false")

    def _log_span(self) -> tuple[float, float]:
        return math.log(self.low - 0.5), math.log(self.high + 0.5)

    def clip(self, value: Any) -> int:
        if isinstance(value, (int, np.integer)):
            number = int(value)  # exact: going through float would round integers past 2**53
        else:
            real = float(value)
            if math.isnan(real):
                return self.low
            number = self.low if real < self.low else self.high if real > self.high \
                else round(real)
        return int(min(max(number, self.low), self.high))

    def to_unit(self, value: Any) -> float:
        if self.log:
            lo, hi = self._log_span()
            return (math.log(self.clip(value)) - lo) / (hi - lo)
        # Each integer owns an equal slice of [0, 1]; its centre is its unit position.
        return (self.clip(value) - self.low + 0.5) / (self.high - self.low + 1)

    def from_unit(self, unit: float) -> int:
        unit = _unit(unit)
        if self.log:
            lo, hi = self._log_span()
            return self.clip(math.floor(math.exp(lo + unit * (hi - lo)) + 0.5))
        return self.clip(self.low + math.floor(unit * (self.high - self.low + 1)))

    def sample(self, rng: random.Random) -> int:
        if self.log:
            return self.from_unit(rng.random())
        return rng.randint(self.low, self.high)  # Python ints: exact up to the int64 limits

    def contains(self, value: Any) -> bool:
        return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and \
            bool(self.low <= value <= self.high)

    def to_dict(self) -> dict[str, Any]:
        linear = {"type": self.kind, "low": self.low, "high": self.high}
        return {**linear, "log": True} if self.log else linear  # as runs before log ints


@dataclass(frozen=True)
class CategoricalParam:
    """One of unordered choices; operators only swap or resample it, never interpolate."""

    name: str
    choices: tuple[Choice, ...]
    kind: ClassVar[str] = "categorical"
    ordered: ClassVar[bool] = False

    def __post_init__(self) -> None:
        label = "values" if self.ordered else "choices"
        key = key_path("space", self.name)
        if not self.choices:
            raise ConfigError(f"{key}.{label}: is empty; give at least one value")
        types = {type(c) for c in self.choices}
        if len(types) > 1:
            raise ConfigError(f"{key}.{label}: {list(self.choices)} mix types "
                              f"({', '.join(sorted(t.__name__ for t in types))}); use one type")
        if any(isinstance(c, float) and math.isnan(c) for c in self.choices):
            raise ConfigError(f"{key}.{label}: nan is not a usable value (it equals nothing)")
        if len(set(self.choices)) != len(self.choices):
            raise ConfigError(f"{key}.{label}: {list(self.choices)} repeat a value; "
                              "list each value once")

    def index(self, value: Any) -> int:
        return self.choices.index(value)

    def clip(self, value: Any) -> Choice:
        return value if value in self.choices else self.choices[0]

    def to_unit(self, value: Any) -> float:
        return (self.index(value) + 0.5) / len(self.choices)

    def from_unit(self, unit: float) -> Choice:
        unit = _unit(unit)
        return self.choices[min(math.floor(unit * len(self.choices)), len(self.choices) - 1)]

    def sample(self, rng: random.Random) -> Choice:
        return self.choices[rng.randrange(len(self.choices))]

    def contains(self, value: Any) -> bool:
        return value in self.choices

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, ("values" if self.ordered else "choices"): list(self.choices)}


@dataclass(frozen=True)
class OrdinalParam(CategoricalParam):
    """One of ordered values; Gaussian mutation may move it to a neighbouring value."""

    kind: ClassVar[str] = "ordinal"
    ordered: ClassVar[bool] = True


Param = FloatParam | IntParam | CategoricalParam | OrdinalParam

_KEYS: dict[str, tuple[set[str], set[str]]] = {
    # type -> (required keys, optional keys), besides "type"
    "float": ({"low", "high"}, {"log"}),
    "int": ({"low", "high"}, {"log"}),
    "categorical": ({"choices"}, set()),
    "ordinal": ({"values"}, set()),
}


@dataclass(frozen=True)
class Space:
    """An ordered set of named parameters."""

    params: tuple[Param, ...]

    def __post_init__(self) -> None:
        if not self.params:
            raise ConfigError("space: no parameters; add at least one [space.NAME] table")
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ConfigError(f"space: parameter names repeat: {names}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def __len__(self) -> int:
        return len(self.params)

    def __getitem__(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def sample(self, rng: random.Random) -> Params:
        return {p.name: p.sample(rng) for p in self.params}

    def clip(self, params: Mapping[str, Any]) -> Params:
        return {p.name: p.clip(params[p.name]) for p in self.params}

    def contains(self, params: Mapping[str, Any]) -> bool:
        return set(params) == set(self.names) and all(
            p.contains(params[p.name]) for p in self.params)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The plain-data form, as written to TOML/JSON/HDF5 and compared on resume."""
        return {p.name: p.to_dict() for p in self.params}

    @classmethod
    def from_dict(cls, table: Mapping[str, Any], prefix: str = "space") -> Space:
        """Build a space from ``{name: {"type": ..., ...}}``; every error names its key."""
        if not isinstance(table, Mapping):
            raise ConfigError(f"{prefix}: expected a table of parameters, got "
                              f"{type(table).__name__}")
        for name in table:
            if not isinstance(name, str):
                raise ConfigError(f"{prefix}: parameter names must be strings, got {name!r}")
        return cls(tuple(_param_from_dict(name, spec, key_path(prefix, name))
                         for name, spec in table.items()))


def _param_from_dict(name: str, spec: Any, key: str) -> Param:
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{key}: expected a table like "
                          f"{{ type = \"float\", low = 0, high = 1 }}, got {spec!r}")
    kind = spec.get("type")
    if not isinstance(kind, str) or kind not in _KEYS:
        shown = "missing" if kind is None else f"{kind!r} is not a parameter type"
        raise ConfigError(f"{key}.type: {shown}; use one of {', '.join(map(repr, _KEYS))}")
    _check_keys(spec, kind, key)
    if kind == "float":
        low, high = (_number(spec[k], f"{key}.{k}") for k in ("low", "high"))
        return FloatParam(name, low, high, _log(spec, key))
    if kind == "int":
        low_i, high_i = (_integer(spec[k], f"{key}.{k}") for k in ("low", "high"))
        return IntParam(name, low_i, high_i, _log(spec, key))
    field = "choices" if kind == "categorical" else "values"
    values = spec[field]
    if not isinstance(values, Sequence) or isinstance(values, str):
        raise ConfigError(f"{key}.{field}: expected a list, got {values!r}")
    for v in values:
        if not isinstance(v, (str, int, float, bool)):
            raise ConfigError(f"{key}.{field}: {v!r} is not a string, number or boolean")
    cls = CategoricalParam if kind == "categorical" else OrdinalParam
    return cls(name, tuple(values))


def _log(spec: Mapping[str, Any], key: str) -> bool:
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise ConfigError(f"{key}.log: expected true or false, got {log!r}")
    return log


def _check_keys(spec: Mapping[str, Any], kind: str, key: str) -> None:
    """Missing and unknown keys of one parameter table, with a did-you-mean for typos."""
    required, optional = _KEYS[kind]
    given = set(spec) - {"type"}
    article = "an" if kind[0] in "aeiou" else "a"
    # Unknown keys first: a typo of a required key ("hihg") then gets its did-you-mean.
    if unknown := sorted(given - required - optional, key=str):
        allowed = sorted(required | optional | {"type"})
        close = difflib.get_close_matches(str(unknown[0]), allowed, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"allowed: {', '.join(allowed)}"
        raise ConfigError(f"{key_path(key, str(unknown[0]))}: unknown key for {article} {kind} "
                          f"parameter; {hint}")
    if missing := sorted(required - given):
        raise ConfigError(f"{key}: {article} {kind} parameter needs {', '.join(missing)}")


def _number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    try:
        return float(value)
    except OverflowError:
        raise ConfigError(f"{key}: {value} is too large for a float") from None


def _integer(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    return value
