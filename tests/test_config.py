"""Tests of atoll.config: defaults, files, overrides, validation messages and round trips."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atoll.config import (
    Config,
    EvolutionConfig,
    MigrationConfig,
    RecordConfig,
    SearchConfig,
    config_to_dict,
    is_builtin,
    load_config,
    parse_config,
)
from atoll.errors import ConfigError
from atoll.objectives.benchmarks import BENCHMARKS
from atoll.space import FloatParam, IntParam, Space

USER_SPACE = {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
              "act": {"type": "categorical", "choices": ["relu", "tanh"]}}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "atoll.toml"
    path.write_text(text)
    return path


def error(table: Any) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(table)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- defaults and built-ins --------------------------------------------------------------------


def test_empty_table_gives_the_documented_defaults() -> None:
    config = parse_config({})
    assert config.seed == 0
    assert config.objective.name == "sphere" and config.objective.dimensions == 2
    assert config.objective.data_dir == "" and dict(config.objective.options) == {}
    assert config.search == SearchConfig(100, 0, 0.0, 1, 1)
    assert config.evolution == EvolutionConfig(0, 0.7, 0.4, 0.1, 0.05, "best", 3)
    assert config.migration == MigrationConfig("migration", 0.1, 1)
    assert config.record == RecordConfig(5.0)


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_builtin_generates_its_space(name: str) -> None:
    config = parse_config({"objective": {"name": name, "dimensions": 3}})
    bench = BENCHMARKS[name]
    assert config.space == Space(tuple(FloatParam(f"x{i}", bench.low, bench.high)
                                       for i in range(3)))
    assert config.objective.dimensions == 3
    assert is_builtin(name)


def test_is_builtin() -> None:
    assert not is_builtin("mypkg.mod:fn")
    assert not is_builtin("Sphere")


def test_builtin_with_explicit_space() -> None:
    config = parse_config({"objective": {"name": "sphere"},
                           "space": {"a": {"type": "int", "low": -3, "high": 3},
                                     "b": {"type": "ordinal", "values": [0.5, 1.0]}}})
    assert config.space.names == ("a", "b")
    assert config.objective.dimensions == 2


def test_user_objective() -> None:
    config = parse_config({"objective": {"name": "my_pkg.models.cnn:train", "data_dir": "/data",
                                         "options": {"epochs": 3, "nested": {"a": [1, 2]}}},
                           "space": USER_SPACE})
    assert config.objective.name == "my_pkg.models.cnn:train"
    assert config.objective.dimensions is None
    assert config.objective.data_dir == "/data"
    assert config.objective.options["nested"]["a"] == (1, 2)
    assert config.space.names == ("lr", "act")


def test_options_are_read_only_and_copied() -> None:
    nested: dict[str, list[int]] = {"a": [1]}
    options = {"epochs": 3, "nested": nested}
    config = parse_config({"objective": {"name": "sphere", "options": options}})
    nested["a"].append(2)
    assert config.objective.options["nested"]["a"] == (1,)
    with pytest.raises(TypeError):
        config.objective.options["epochs"] = 4  # type: ignore[index]
    with pytest.raises(TypeError):
        config.objective.options["nested"]["b"] = 1  # type: ignore[index]


def test_options_look_up_like_a_dict() -> None:
    options = parse_config({"objective": {"name": "sphere", "options": {
        "epochs": 3, "zero": 0}}}).objective.options
    assert options.get("epochs") == 3 and options.get("epochs", 5) == 3
    assert options.get("missing") is None and options.get("missing", 5) == 5
    assert options.get("zero", 5) == 0  # a falsy value is not a missing key
    assert "epochs" in options and "zero" in options and "missing" not in options
    assert 3 not in options and list(options) == ["epochs", "zero"]


def test_config_is_frozen_and_hashable() -> None:
    config = parse_config({})
    with pytest.raises(AttributeError):
        config.seed = 3  # type: ignore[misc]
    assert hash(config) == hash(parse_config({}))


def test_parse_does_not_mutate_its_input() -> None:
    table = {"objective": {"name": "sphere", "options": {"a": [1]}}, "search": {"islands": 2}}
    before = copy.deepcopy(table)
    parse_config(table)
    assert table == before


# --- files -------------------------------------------------------------------------------------

FULL = """
seed = 7
[objective]
name = "pkg.mod:fn"
data_dir = "/scratch/data"
[objective.options]
epochs = 2
[space.lr]
type = "float"
low = 1e-4
high = 1e-1
log = true
[space.layers]
type = "int"
low = 1
high = 4
[search]
generations = 10
max_evaluations = 50
wall_time = 3600
ranks_per_worker = 2
islands = 3
[evolution]
population_size = 8
crossover = 0.5
mutation = 1
random_init = 0
sigma_factor = 0.1
selection = "tournament"
tournament_size = 4
[migration]
mode = "pollination"
probability = 0.05
migrants = 2
[record]
flush_interval = 1
"""


def test_full_file(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL))
    assert config.seed == 7
    assert config.objective.options == {"epochs": 2}
    assert config.space.names == ("lr", "layers")
    assert config.search == SearchConfig(10, 50, 3600.0, 2, 3)
    assert config.evolution == EvolutionConfig(8, 0.5, 1.0, 0.0, 0.1, "tournament", 4)
    assert config.migration == MigrationConfig("pollination", 0.05, 2)
    assert config.record.flush_interval == 1.0
    assert isinstance(config.search.wall_time, float)
    assert isinstance(config.evolution.mutation, float)


def test_path_as_string(tmp_path: Path) -> None:
    assert load_config(str(write(tmp_path, "seed = 3"))).seed == 3


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=r"nope\.toml: no such config file$"):
        load_config(path)


def test_directory_is_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_bytes(b"seed = 1\n# \xff\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(path)


def test_toml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "seed = 1\n[search]\nislands = = 2\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: invalid TOML: ")
    assert "line 3" in message and "\n" not in message


def test_embedded_default_is_the_digits_classifier_on_2_rank_workers() -> None:
    config = load_config(None)
    assert config.objective.name == "atoll.objectives.classifier:train"
    assert config.objective.options["dataset"] == "digits"
    assert config.space.names == ("conv_layers", "activation", "lr", "gamma")
    assert config.search.ranks_per_worker == 2 and config.search.islands == 2


RASTRIGIN = 'seed = 42\n[objective]\nname = "rastrigin"\ndimensions = 4\n'


def rastrigin(tmp_path: Path) -> Path:
    return write(tmp_path, RASTRIGIN)


def test_embedded_default_matches_the_package_file() -> None:
    text = (Path(__file__).parents[1] / "app" / "atoll" / "default.toml").read_text()
    assert parse_config(tomllib.loads(text)) == load_config(None)


def test_config_import_stays_light() -> None:
    code = ("import sys, atoll.config; "
            "print(any(m in sys.modules for m in ('torch', 'mpi4py', 'h5py')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(Path(__file__).parents[1] / "app")}, check=True)
    assert out.stdout.strip() == "False"


# --- overrides ---------------------------------------------------------------------------------


def test_override_types(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL), [
        "seed=9", "search.islands=4", "search.wall_time=1.5", "evolution.selection=uniform",
        "evolution.mutation = 0.25", 'objective.data_dir="/x y"', "objective.options.flag=true",
        "objective.options.list=[1, 2]", "objective.options.table={a = 1}",
    ])
    assert config.seed == 9 and config.search.islands == 4 and config.search.wall_time == 1.5
    assert config.evolution.selection == "uniform" and config.evolution.mutation == 0.25
    assert config.objective.data_dir == "/x y"
    assert config.objective.options["flag"] is True
    assert config.objective.options["list"] == (1, 2)
    assert config.objective.options["table"] == {"a": 1}


def test_override_string_fallback(tmp_path: Path) -> None:
    config = load_config(rastrigin(tmp_path), [
        "objective.name=sphere", "objective.data_dir=/data/mnist",
                                "objective.options.msg=hello world", "objective.options.e="])
    assert config.objective.name == "sphere"
    assert config.objective.data_dir == "/data/mnist"
    assert config.objective.options["msg"] == "hello world"
    assert config.objective.options["e"] == ""


def test_override_value_with_equals_and_injection() -> None:
    config = load_config(None, ["objective.options.expr=a=b", "objective.options.two=1\nx = 2"])
    assert config.objective.options["expr"] == "a=b"
    assert config.objective.options["two"] == "1\nx = 2"


def test_override_creates_tables(tmp_path: Path) -> None:
    path = write(tmp_path, 'seed = 1\n[objective]\nname = "ackley"\n')
    config = load_config(path, ["evolution.mutation=0.5", "record.flush_interval=2"])
    assert config.evolution.mutation == 0.5 and config.record.flush_interval == 2.0


def test_override_edits_a_builtin_generated_space(tmp_path: Path) -> None:
    config = load_config(rastrigin(tmp_path), ["space.x0.high=3"])
    assert config.space["x0"] == FloatParam("x0", -5.12, 3.0)
    assert config.space.names == ("x0", "x1", "x2", "x3")
    assert config.objective.dimensions == 4


def test_override_of_an_explicit_space(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL), ["space.layers.high=8", "space.lr.log=false"])
    assert config.space["layers"] == IntParam("layers", 1, 8)
    assert config.space["lr"] == FloatParam("lr", 1e-4, 1e-1, log=False)


def test_overrides_apply_in_order() -> None:
    assert load_config(None, ["seed=1", "seed=2"]).seed == 2


@pytest.mark.parametrize("item", ["xyz", "=3", "search.=3", ".islands=2", "search..islands=2"])
def test_bad_override(item: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, [item])
    assert str(info.value) == f"--set {item!r}: expected KEY=VALUE, e.g. search.islands=2"


def test_override_errors_look_like_file_errors() -> None:
    with pytest.raises(ConfigError, match=r"^search\.islands: expected an integer >= 1, got 0$"):
        load_config(None, ["search.islands=0"])
    with pytest.raises(ConfigError, match=r"^search\.islands: expected an integer >= 1, got '2x'"):
        load_config(None, ["search.islands=2x"])
    with pytest.raises(ConfigError, match="did you mean 'islands'"):
        load_config(None, ["search.island=2"])


def test_override_into_a_scalar() -> None:
    with pytest.raises(ConfigError, match="^seed.x: cannot set a key inside seed, which is 7"):
        load_config(None, ["seed.x=1"])


# --- validation messages -----------------------------------------------------------------------


@pytest.mark.parametrize(("table", "expected"), [
    ({"seed": -1}, "seed: expected an integer >= 0, got -1"),
    ({"seed": 1.5}, "seed: expected an integer >= 0, got 1.5"),
    ({"seed": True}, "seed: expected an integer >= 0, got True"),
    ({"seed": 2**64}, "seed: expected an integer <= 9,223,372,036,854,775,807"),
    ({"search": {"islands": 0}}, "search.islands: expected an integer >= 1, got 0"),
    ({"search": {"islands": "2"}}, "search.islands: expected an integer >= 1, got '2'"),
    ({"search": {"generations": True}}, "search.generations: expected an integer >= 1, got True"),
    ({"search": {"generations": 0}}, "search.generations: expected an integer >= 1, got 0"),
    ({"search": {"max_evaluations": -1}}, "search.max_evaluations: expected an integer >= 0"),
    ({"search": {"ranks_per_worker": 0}}, "search.ranks_per_worker: expected an integer >= 1"),
    ({"search": {"wall_time": -1}}, "search.wall_time: expected a number >= 0"
     " and at most 1e+07 (seconds: about 116 days), got -1"),
    ({"search": {"wall_time": math.inf}}, "search.wall_time: expected a number >= 0"
     " and at most 1e+07 (seconds: about 116 days), got inf"),
    ({"search": {"wall_time": math.nan}}, "search.wall_time: expected a number >= 0"
     " and at most 1e+07 (seconds: about 116 days), got nan"),
    ({"search": {"wall_time": False}}, "search.wall_time: expected a number >= 0"
     " and at most 1e+07 (seconds: about 116 days), got False"),
    ({"search": {"wall_time": 10**400}}, "search.wall_time: expected a number >= 0"),
    ({"search": {"wall_time": 2e7}}, "search.wall_time: expected a number >= 0 and at most "
     "1e+07 (seconds: about 116 days), got 20000000.0"),
    ({"evolution": {"population_size": -2}}, "evolution.population_size: expected an integer >= 0"),
    ({"evolution": {"crossover": 1.5}}, "evolution.crossover: expected a probability in [0, 1], "
                                        "got 1.5"),
    ({"evolution": {"mutation": -0.1}}, "evolution.mutation: expected a probability in [0, 1]"),
    ({"evolution": {"random_init": "0.1"}}, "evolution.random_init: expected a probability in"),
    ({"evolution": {"random_init": True}}, "evolution.random_init: expected a probability in"),
    ({"evolution": {"crossover": math.nan}}, "evolution.crossover: expected a probability in"),
    ({"evolution": {"sigma_factor": 0}}, "evolution.sigma_factor: expected a number > 0, got 0"),
    ({"evolution": {"sigma_rule": "succes"}},
     "evolution.sigma_rule: expected one of 'fixed', 'success', got 'succes'; "
     "did you mean 'success'?"),
    ({"evolution": {"selection": "bst"}},
     "evolution.selection: expected one of 'best', 'uniform', 'tournament', got 'bst'; "
     "did you mean 'best'?"),
    ({"evolution": {"selection": 1}}, "evolution.selection: expected one of"),
    ({"evolution": {"tournament_size": 1}}, "evolution.tournament_size: expected an integer >= 2"),
    ({"migration": {"mode": "pollenation"}}, "migration.mode: expected one of 'migration', "
                                             "'pollination', got 'pollenation'; did you mean "
                                             "'pollination'?"),
    ({"migration": {"probability": 2}}, "migration.probability: expected a probability in [0, 1]"),
    ({"migration": {"migrants": 0}}, "migration.migrants: expected an integer >= 1, got 0"),
    ({"record": {"flush_interval": 0}}, "record.flush_interval: expected a number > 0"
     " and at most 1e+07 (seconds: about 116 days), got 0"),
    ({"record": {"flush_interval": -3.0}}, "record.flush_interval: expected a number > 0"),
    ({"search": 3}, "search: expected a table, got 3"),
    ({"objective": "sphere"}, "objective: expected a table, got 'sphere'"),
    ({"objective": {"name": 3}}, "objective.name: expected a string, got 3"),
    ({"objective": {"name": "sphere", "data_dir": 1}}, "objective.data_dir: expected a string"),
    ({"objective": {"name": "sphere", "options": [1]}}, "objective.options: expected a table"),
    ({"objective": {"name": "sphere", "options": {"a": None}}},
     "objective.options.a: None is not a TOML value"),
    ({"objective": {"name": "sphere", "dimensions": 0}},
     "objective.dimensions: expected an integer >= 1, got 0"),
    ({"objective": {"name": "sphere", "dimensions": 2}, "space": USER_SPACE},
     "objective.dimensions: given together with [space]"),
    ({"objective": {"name": "a.b:c", "dimensions": 2}, "space": USER_SPACE},
     "objective.dimensions: only a built-in benchmark takes dimensions"),
    ({"objective": {"name": "a.b:c"}}, "space: missing; objective 'a.b:c' needs [space.NAME]"),
    ({"objective": {"name": "sphere"}, "space": USER_SPACE}, "space.act: built-in 'sphere' needs "
                                                             "numbers"),
    ({"space": {}}, "space: no parameters"),
    ({"space": {"x": {"type": "float", "low": 1, "high": 0}}}, "space.x: low=1.0 is above high"),
    ({"objective": {"name": "a.b:c"}, "space": {"x": {"type": "flaot"}}},
     "space.x.type: 'flaot' is not a parameter type"),
    ([1], "config: expected a table, got [1]"),
])
def test_errors_name_key_value_and_allowed(table: Any, expected: str) -> None:
    assert error(table).startswith(expected)


@pytest.mark.parametrize("name", ["foo", "pkg.mod", "pkg.mod:", ":fn", "pkg..mod:fn",
                                  "pkg.mod:fn.x", "1pkg:fn", "pkg mod:fn", ""])
def test_bad_objective_names(name: str) -> None:
    message = error({"objective": {"name": name}, "space": USER_SPACE})
    assert message == (f"objective.name: {name!r} is neither a built-in (ackley, griewank, "
                       "rastrigin, rosenbrock, schwefel, sphere, step) nor "
                       "'package.module:function'")


def test_objective_name_did_you_mean() -> None:
    assert error({"objective": {"name": "rastrign"}}).endswith("; did you mean 'rastrigin'?")


@pytest.mark.parametrize("name", ["pkg:fn", "a.b.c:train_model", "_p._q:_f"])
def test_good_objective_references(name: str) -> None:
    assert parse_config({"objective": {"name": name}, "space": USER_SPACE}).objective.name == name


@pytest.mark.parametrize(("table", "expected"), [
    ({"evolution": {"crosover": 0.5}}, "evolution.crosover: unknown key; did you mean "
                                       "'crossover'?"),
    ({"serch": {}}, "serch: unknown key; did you mean 'search'?"),
    ({"crossover": 0.5}, "crossover: unknown key; did you mean 'evolution.crossover'?"),
    ({"objective": {"nmae": "sphere"}}, "objective.nmae: unknown key; did you mean 'name'?"),
    ({"migration": {"zzz": 1}}, "migration.zzz: unknown key; allowed: mode, probability, "
                                "migrants"),
    ({"search": {"a b": 1}}, 'search."a b": unknown key; allowed:'),
    ({"space": {"x": {"type": "int", "low": 0, "high": 2, "hihg": 3}}},
     "space.x.hihg: unknown key for an int parameter; did you mean 'high'?"),
])
def test_did_you_mean(table: Any, expected: str) -> None:
    assert error(table).startswith(expected)


def test_options_accept_any_key() -> None:
    config = parse_config({"objective": {"name": "sphere", "options": {"crosover": 1}}})
    assert config.objective.options == {"crosover": 1}


# --- round trip --------------------------------------------------------------------------------


def test_round_trip_of_a_full_config(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL), ["objective.options.x={a = [1, {b = 2}]}"])
    data = config_to_dict(config)
    assert parse_config(data) == config
    assert json.loads(json.dumps(data)) == data
    assert isinstance(data["objective"]["options"]["x"]["a"], list)


def test_round_trip_of_a_builtin_writes_the_space_out(tmp_path: Path) -> None:
    config = load_config(rastrigin(tmp_path))
    data = config_to_dict(config)
    assert "dimensions" not in data["objective"]
    assert list(data["space"]) == ["x0", "x1", "x2", "x3"]
    assert parse_config(data) == config


def test_round_trip_through_toml_text() -> None:
    config = load_config(None)
    data = config_to_dict(config)
    assert parse_config(tomllib.loads(_to_toml(data))) == config


def _to_toml(data: dict[str, Any], prefix: str = "") -> str:
    """A minimal TOML writer for the test (tables, scalars, lists of scalars)."""
    lines = [f"{k} = {json.dumps(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for key, value in data.items():
        if isinstance(value, dict):
            lines.append(f"[{prefix}{key}]")
            lines.append(_to_toml(value, f"{prefix}{key}."))
    return "\n".join(lines)


# --- properties --------------------------------------------------------------------------------

_KNOWN = ["seed", "objective", "space", "search", "evolution", "migration", "record", "name",
          "dimensions", "data_dir", "options", "generations", "islands", "wall_time", "crossover",
          "selection", "mode", "flush_interval", "type", "low", "high", "x0"]
_KEYS = st.sampled_from(_KNOWN) | st.text(max_size=4)
_SCALARS = (st.booleans() | st.integers() | st.integers(-3, 3) | st.floats() | st.floats(0, 1)
            | st.text(max_size=5) | st.sampled_from(["sphere", "a.b:c", "best", "float", "int"])
            | st.datetimes() | st.dates() | st.times())
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=15,
)


def _valid_base() -> dict[str, Any]:
    return config_to_dict(parse_config({"objective": {"name": "sphere"}}))


@st.composite
def _mutated(draw: st.DrawFn) -> dict[str, Any]:
    """A valid table with one value replaced or one key added somewhere."""
    table = _valid_base()
    node: dict[str, Any] = table
    while True:
        tables = [k for k, v in node.items() if isinstance(v, dict)]
        if not tables or draw(st.booleans()):
            break
        node = node[draw(st.sampled_from(tables))]
    key = draw(st.sampled_from(sorted(node)) | _KEYS) if node else draw(_KEYS)
    node[key] = draw(_VALUES)
    return table


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=st.dictionaries(_KEYS, _VALUES, max_size=5) | _mutated() | _VALUES)
def test_parse_config_parses_or_raises_config_error(table: Any) -> None:
    try:
        config = parse_config(table)
    except ConfigError as err:
        assert "\n" not in str(err)
        return
    assert isinstance(config, Config)
    data = config_to_dict(config)
    if not _has_nan(data):  # nan != nan, so an option holding nan cannot compare equal
        assert parse_config(data) == config


@settings(max_examples=200, deadline=None)
@given(items=st.lists(st.text(max_size=12), max_size=3))
def test_arbitrary_overrides_raise_only_config_error(items: list[str]) -> None:
    try:
        load_config(None, items)
    except ConfigError as err:
        assert "\n" not in str(err)


def _has_nan(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_has_nan(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_nan(v) for v in value)
    return isinstance(value, float) and math.isnan(value)
