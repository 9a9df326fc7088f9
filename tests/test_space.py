"""Unit and property tests of atoll.space: typed parameters, sampling, encoding, parsing."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from atoll.errors import ConfigError
from atoll.space import (
    CategoricalParam,
    FloatParam,
    IntParam,
    OrdinalParam,
    Space,
    key_path,
)

N = 2000


@pytest.fixture
def rng() -> random.Random:
    return random.Random(1234)


@pytest.fixture
def mixed() -> Space:
    return Space.from_dict({
        "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
        "x": {"type": "float", "low": -2, "high": 3},
        "layers": {"type": "int", "low": 1, "high": 4},
        "act": {"type": "categorical", "choices": ["relu", "tanh", "gelu"]},
        "width": {"type": "ordinal", "values": [16, 32, 64]},
    })


# --- sampling ----------------------------------------------------------------------------------


def test_samples_in_bounds_with_right_types(mixed: Space, rng: random.Random) -> None:
    for _ in range(N):
        params = mixed.sample(rng)
        assert mixed.contains(params)
        assert type(params["lr"]) is float and type(params["x"]) is float
        assert type(params["layers"]) is int
        assert params["act"] in ("relu", "tanh", "gelu")
        assert params["width"] in (16, 32, 64)


def test_int_reaches_both_bounds(rng: random.Random) -> None:
    seen = {IntParam("n", 1, 4).sample(rng) for _ in range(N)}
    assert seen == {1, 2, 3, 4}


def test_int_sampling_at_int64_limits(rng: random.Random) -> None:
    full = IntParam("n", -(2**63), 2**63 - 1)
    top = IntParam("n", 2**63 - 1, 2**63 - 1)
    assert all(full.contains(full.sample(rng)) for _ in range(100))
    assert top.sample(rng) == 2**63 - 1


def test_log_float_spreads_over_orders_of_magnitude(rng: random.Random) -> None:
    param = FloatParam("lr", 1e-4, 1e-2, log=True)
    samples = np.array([param.sample(rng) for _ in range(N)])
    assert samples.min() >= 1e-4 and samples.max() <= 1e-2
    assert 10 ** -3.15 < np.median(samples) < 10 ** -2.85
    # a quarter of the draws below 10**-3.5: linear sampling would give almost none
    assert 0.2 < np.mean(samples < 10**-3.5) < 0.3


def test_linear_float_is_uniform(rng: random.Random) -> None:
    samples = np.array([FloatParam("x", -2.0, 3.0).sample(rng) for _ in range(N)])
    assert abs(np.median(samples) - 0.5) < 0.25


def test_huge_float_span_does_not_overflow(rng: random.Random) -> None:
    param = FloatParam("x", -1e308, 1.7e308)
    values = [param.sample(rng) for _ in range(100)]
    assert all(param.contains(v) for v in values)
    assert param.from_unit(0.0) == -1e308 and param.from_unit(1.0) == 1.7e308
    assert 0.0 <= param.to_unit(0.0) <= 1.0


def test_degenerate_bounds(rng: random.Random) -> None:
    assert FloatParam("x", 2.0, 2.0).sample(rng) == 2.0
    assert FloatParam("x", 2.0, 2.0, log=True).sample(rng) == 2.0
    assert IntParam("n", 5, 5).sample(rng) == 5
    assert CategoricalParam("c", ("a",)).sample(rng) == "a"


# --- clip and unit encoding --------------------------------------------------------------------


def test_clip() -> None:
    assert FloatParam("x", 0.0, 1.0).clip(3) == 1.0
    assert FloatParam("x", 0.0, 1.0).clip(-3) == 0.0
    assert FloatParam("x", 0.0, 1.0).clip(float("nan")) == 0.0
    assert IntParam("n", 0, 10).clip(3.6) == 4
    assert IntParam("n", 0, 10).clip(-7) == 0
    assert IntParam("n", 0, 10).clip(float("inf")) == 10
    assert IntParam("n", 0, 10).clip(float("nan")) == 0
    assert IntParam("n", 0, 2**62).clip(2**60 + 1) == 2**60 + 1  # exact past 2**53
    assert CategoricalParam("c", ("a", "b")).clip("b") == "b"
    assert CategoricalParam("c", ("a", "b")).clip("z") == "a"


def test_space_clip(mixed: Space) -> None:
    clipped = mixed.clip({"lr": 5.0, "x": -9, "layers": 7.2, "act": "nope", "width": 32})
    assert clipped == {"lr": 0.1, "x": -2.0, "layers": 4, "act": "relu", "width": 32}
    assert mixed.contains(clipped)


def test_unit_round_trips(mixed: Space, rng: random.Random) -> None:
    for _ in range(200):
        params = mixed.sample(rng)
        for p in mixed.params:
            unit = p.to_unit(params[p.name])
            assert 0.0 <= unit <= 1.0
            if isinstance(p, FloatParam):
                assert math.isclose(p.from_unit(unit), params[p.name], rel_tol=1e-9)
            else:
                assert p.from_unit(unit) == params[p.name]


def test_from_unit_ends_and_out_of_range() -> None:
    lin, log = FloatParam("x", -1.0, 3.0), FloatParam("lr", 1e-4, 1.0, log=True)
    assert (lin.from_unit(0.0), lin.from_unit(1.0), lin.from_unit(0.5)) == (-1.0, 3.0, 1.0)
    assert math.isclose(log.from_unit(0.5), 1e-2)
    assert lin.from_unit(-4.0) == -1.0 and lin.from_unit(7.0) == 3.0
    assert lin.from_unit(float("nan")) == -1.0
    assert IntParam("n", 1, 4).from_unit(1.0) == 4
    assert IntParam("n", 1, 4).from_unit(0.0) == 1
    assert OrdinalParam("w", (1, 2, 3)).from_unit(1.0) == 3
    assert OrdinalParam("w", (1, 2, 3)).from_unit(float("nan")) == 1


def test_int_slices_are_equal() -> None:
    param = IntParam("n", 0, 3)
    assert [param.to_unit(v) for v in range(4)] == [0.125, 0.375, 0.625, 0.875]


# --- from_dict / to_dict -----------------------------------------------------------------------


def test_dict_round_trip(mixed: Space) -> None:
    again = Space.from_dict(mixed.to_dict())
    assert again == mixed
    assert again.names == ("lr", "x", "layers", "act", "width")
    assert isinstance(again["width"], OrdinalParam) and isinstance(again["act"], CategoricalParam)
    assert again["x"] == FloatParam("x", -2.0, 3.0)  # int bounds of a float become floats


def test_space_mapping_protocol(mixed: Space) -> None:
    assert len(mixed) == 5
    with pytest.raises(KeyError):
        mixed["nope"]
    assert not mixed.contains({"lr": 0.01})


def test_key_path_quotes_keys_that_are_not_bare() -> None:
    assert key_path("space", "lr") == "space.lr"
    assert key_path("", "seed") == "seed"
    assert key_path("space", "a b\nc") == 'space."a b\\nc"'


def _error(table: Any) -> str:
    with pytest.raises(ConfigError) as info:
        Space.from_dict(table)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(("table", "expected"), [
    ({"a": {"type": "float", "low": 2, "high": 1}}, "space.a: low=2.0 is above high=1.0"),
    ({"a": {"type": "int", "low": 2, "high": 1}}, "space.a: low=2 is above high=1"),
    ({"a": {"type": "categorical", "choices": []}}, "space.a.choices: is empty"),
    ({"a": {"type": "ordinal", "values": []}}, "space.a.values: is empty"),
    ({"a": {"type": "ordinal", "values": [1, 1]}}, "space.a.values: [1, 1] repeat a value"),
    ({"a": {"type": "categorical", "choices": ["x", 1]}}, "space.a.choices: ['x', 1] mix types"),
    ({"a": {"type": "categorical", "choices": "xy"}}, "space.a.choices: expected a list"),
    ({"a": {"type": "categorical", "choices": [[1]]}}, "space.a.choices: [1] is not a string"),
    ({"a": {"type": "categorical", "choices": [math.nan]}}, "space.a.choices: nan"),
    ({"a": {"type": "float", "low": 0, "high": 1, "log": True}}, "space.a: log scale needs low"),
    ({"a": {"type": "float", "low": -1, "high": 1, "log": True}}, "space.a: log scale"),
    ({"a": {"type": "float", "low": 0, "high": 1, "logg": True}},
     "space.a.logg: unknown key for a float parameter; did you mean 'log'?"),
    ({"a": {"type": "int", "low": 0, "high": 1, "zzz": 1}}, "space.a.zzz: unknown key"),
    ({"a": {"type": "float", "low": "0", "high": 1}}, "space.a.low: expected a number, got '0'"),
    ({"a": {"type": "float", "low": True, "high": 1}}, "space.a.low: expected a number, got True"),
    ({"a": {"type": "int", "low": 0.5, "high": 1}}, "space.a.low: expected an integer, got 0.5"),
    ({"a": {"type": "float", "low": 0, "high": 1, "log": 1}}, "space.a.log: expected true or"),
    ({"a": {"type": "float", "low": 0, "high": math.inf}}, "space.a: bounds must be finite"),
    ({"a": {"type": "float", "low": math.nan, "high": 1}}, "space.a: bounds must be finite"),
    ({"a": {"type": "float", "low": 10**400, "high": 1}}, "space.a.low: 1000"),
    ({"a": {"type": "int", "low": 0, "high": 2**63}}, "space.a: bound 9223372036854775808"),
    ({"a": {"type": "float", "low": 0}}, "space.a: a float parameter needs high"),
    ({"a": {"type": "complex", "low": 0}}, "space.a.type: 'complex' is not a parameter type"),
    ({"a": {"type": ["float"]}}, "space.a.type: ['float'] is not a parameter type"),
    ({"a": {"low": 0, "high": 1}}, "space.a.type: missing"),
    ({"a": 3}, "space.a: expected a table"),
    ({"a b": 3}, 'space."a b": expected a table'),
    ({}, "space: no parameters"),
    ([1, 2], "space: expected a table of parameters, got list"),
])
def test_errors_name_the_key(table: Any, expected: str) -> None:
    assert _error(table).startswith(expected)


def test_direct_construction_validates() -> None:
    with pytest.raises(ConfigError, match="space.x: low=1"):
        FloatParam("x", 1.0, 0.0)
    with pytest.raises(ConfigError, match="parameter names repeat"):
        Space((FloatParam("x", 0.0, 1.0), IntParam("x", 0, 1)))


# --- properties --------------------------------------------------------------------------------

_KEYS = st.sampled_from(["type", "low", "high", "log", "choices", "values", "x"]) | st.text(
    max_size=4)
_SCALARS = (st.booleans() | st.integers() | st.integers(-10, 10) | st.floats()
            | st.floats(-100, 100) | st.text(max_size=5)
            | st.sampled_from(["float", "int", "categorical", "ordinal"]))
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=5),
    max_leaves=12,
)
_BOUND = st.integers(-10, 10) | st.floats(-100, 100) | _SCALARS
_SPECS = st.one_of(
    st.fixed_dictionaries({"type": st.just("float"), "low": _BOUND, "high": _BOUND},
                          optional={"log": st.booleans() | _SCALARS}),
    st.fixed_dictionaries({"type": st.just("int"), "low": _BOUND, "high": _BOUND}),
    st.fixed_dictionaries({"type": st.just("categorical"),
                           "choices": st.lists(_SCALARS, max_size=4) | _VALUES}),
    st.fixed_dictionaries({"type": st.just("ordinal"),
                           "values": st.lists(_SCALARS, max_size=4) | _VALUES}),
).flatmap(lambda spec: st.dictionaries(_KEYS, _VALUES, max_size=1).map(
    lambda extra: {**extra, **spec}) | st.just(spec))
_TABLES = st.dictionaries(st.text(max_size=4), _SPECS, min_size=1, max_size=4) | st.dictionaries(
    st.text(max_size=4), _SPECS | _VALUES, max_size=4) | _VALUES


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=_TABLES, seed=st.integers(0, 2**32 - 1))
def test_from_dict_parses_or_raises_config_error(table: Any, seed: int) -> None:
    try:
        space = Space.from_dict(table)
    except ConfigError as err:
        assert "\n" not in str(err)
        return
    rng = random.Random(seed)
    for _ in range(5):
        params = space.sample(rng)
        assert space.contains(params)
        assert space.clip(params) == params
        for p in space.params:
            assert p.contains(p.from_unit(p.to_unit(params[p.name])))
    assert Space.from_dict(space.to_dict()) == space


@settings(max_examples=300, deadline=None)
@given(a=st.floats(allow_nan=False, allow_infinity=False),
       b=st.floats(allow_nan=False, allow_infinity=False), unit=st.floats(), log=st.booleans())
# distinct bounds with the same log; a log step rounding past the largest float
@example(a=1.7976931348621712e+308, b=1.7976931348621714e+308, unit=0.0, log=True)
@example(a=1.0725104195075003e-300, b=1.7976931348623157e+308, unit=1.0, log=True)
def test_float_from_unit_always_in_bounds(a: float, b: float, unit: float, log: bool) -> None:
    if log:
        a, b = abs(a) or 1e-300, abs(b) or 1e-300
    param = FloatParam("x", min(a, b), max(a, b), log=log)
    value = param.from_unit(unit)
    assert param.contains(value)
    assert param.clip(value) == value
    assert param.contains(param.from_unit(param.to_unit(value)))


# -- integers on a log scale ---------------------------------------------------------------------

def test_a_log_int_gives_each_value_its_share_of_log_space() -> None:
    param = Space.from_dict({"n": {"type": "int", "low": 1, "high": 1000, "log": True}}).params[0]
    rng = random.Random(3)
    draws = [param.sample(rng) for _ in range(60000)]
    assert min(draws) >= 1 and max(draws) <= 1000 and all(isinstance(d, int) for d in draws)
    total = math.log(1000.5 / 0.5)
    for value in (1, 2, 10):
        share = math.log((value + 0.5) / (value - 0.5)) / total
        assert draws.count(value) / len(draws) == pytest.approx(share, rel=0.05)
    assert [param.from_unit(param.to_unit(v)) for v in (1, 2, 3, 57, 999, 1000)] == \
        [1, 2, 3, 57, 999, 1000]
    assert param.from_unit(0.0) == 1 and param.from_unit(1.0) == 1000


def test_a_log_int_is_recorded_as_such_and_a_linear_one_as_before() -> None:
    table = {"n": {"type": "int", "low": 2, "high": 64, "log": True},
             "m": {"type": "int", "low": 0, "high": 3}}
    space = Space.from_dict(table)
    assert space.to_dict() == table and Space.from_dict(space.to_dict()) == space
    with pytest.raises(ConfigError, match=r"space.n: log scale needs low >= 1 for an int, got "
                                          r"low=0; use a lower bound of at least 1 or log = false"):
        Space.from_dict({"n": {"type": "int", "low": 0, "high": 8, "log": True}})
    with pytest.raises(ConfigError, match=r"space.n.log: expected true or false, got 'yes'"):
        Space.from_dict({"n": {"type": "int", "low": 1, "high": 8, "log": "yes"}})
