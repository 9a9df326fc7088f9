"""The ``objective`` table and the space it is searched over: a built-in benchmark, a
``module:function``, or a command with placeholders."""

from __future__ import annotations

import difflib
import string
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from atoll.config.checks import integer, one_of, seconds, show, string_value
from atoll.config.frozen import FrozenMap, freeze
from atoll.config.schema import check_keys, require_table
from atoll.config.sections import BUILTINS, DIRECTIONS, ObjectiveConfig
from atoll.errors import ConfigError
from atoll.space import CategoricalParam, FloatParam, Space, key_path

_OBJECTIVE_KEYS = ("name", "dimensions", "data_dir", "options", "direction", "command", "env",
                   "result_metric", "stop_grace", "results")
_COMMAND_ONLY = ("env", "result_metric", "stop_grace", "results")
RESULTS_FROM = ("stdout", "file")
"""Where a command objective's ``ATOLL`` lines come from (``objective.results``)."""
COMMAND = "command"
"""``objective.name`` of a command objective."""
COMMAND_FIELDS = ("id", "run_dir", "work_dir", "data_dir", "python", "checkpoint_dir",
                  "resume_dir", "results_file", "inherit_from", "inherit_epoch")
"""Placeholders a command may use besides the parameters' names: the individual's id, the run
directory, the individual's work directory, ``objective.data_dir``, Atoll's Python, where the
script saves its checkpoint and resumes from (empty when there is none yet), the file its
``ATOLL`` lines go to with ``objective.results = "file"``, and the parent and epoch whose
checkpoint it resumes from when that is a parent's (empty otherwise)."""
DIMENSIONS = integer(1)
DEFAULT_DIMENSIONS = 2


# --- the objective and its space ---------------------------------------------------------------


def is_builtin(name: str) -> bool:
    """Whether ``name`` is one of the benchmark functions that ship with Atoll."""
    return isinstance(name, str) and name in BUILTINS


def _is_reference(name: str) -> bool:
    """``package.module:function``: a colon with (dotted) identifiers on both sides."""
    module, colon, function = name.partition(":")
    return bool(colon) and function.isidentifier() and \
        all(part.isidentifier() for part in module.split("."))


def _objective_name(value: Any) -> str:
    name = string_value(value, "objective.name")
    if is_builtin(name) or _is_reference(name):
        return name
    close = difflib.get_close_matches(name, list(BUILTINS), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"objective.name: {show(name)} is neither a built-in "
                      f"({', '.join(sorted(BUILTINS))}) nor 'package.module:function'{hint}")


def _placeholders(text: str, key: str) -> list[str]:
    """The ``{name}`` fields of one command word (``{{`` and ``}}`` are literal braces)."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
    except ValueError as err:
        raise ConfigError(f"{key}: {show(text)} is not a valid template ({err}); write a "
                          "literal brace as {{ or }}") from None
    for name in fields:
        if not name.isidentifier():
            raise ConfigError(f"{key}: placeholder {{{name}}} in {show(text)} is not a name")
    return fields


_PATH_FIELDS = ("run_dir", "work_dir", "checkpoint_dir", "results_file")
"""Command placeholders filled with a ``pathlib.Path`` (the others with str or int)."""


def _samples(space: Space) -> dict[str, tuple[Any, ...]]:
    """Values of each placeholder's type a format spec must take: the parameters' bounds or
    choices, and what the command's own placeholders hold when it starts."""
    samples: dict[str, tuple[Any, ...]] = {field: ("",) for field in COMMAND_FIELDS}
    samples.update({field: (PurePosixPath("/run"),) for field in _PATH_FIELDS})
    samples.update(id=(0,), resume_dir=("", PurePosixPath("/run")), inherit_epoch=("", "3"))
    for param in space.params:
        samples[param.name] = (param.choices if isinstance(param, CategoricalParam)
                               else (param.low, param.high))
    return samples


def _check_formats(text: str, key: str, samples: Mapping[str, tuple[Any, ...]]) -> None:
    """A format spec or conversion that cannot format its placeholder's values (``{lr:.3q}``,
    ``{act:.3f}`` of a categorical) fails when the config is read, not in every evaluation."""
    formatter = string.Formatter()
    for _, name, given_spec, conversion in formatter.parse(text):
        spec = given_spec or ""
        if name is None or not (spec or conversion) or "{" in spec:
            continue
        for value in samples[name]:
            try:
                formatter.format_field(formatter.convert_field(value, conversion), spec)
            except (ValueError, TypeError, ArithmeticError) as err:  # {n:c} of -5: overflow
                field = "{" + name + (f"!{conversion}" if conversion else "") + \
                    (f":{spec}" if spec else "") + "}"
                raise ConfigError(f"{key}: {field} cannot format {name} = {value!r} ({err}); "
                                  "fix or drop what follows the name, e.g. {lr:.3g}") from None


def _check_text(text: str, key: str) -> None:
    if "\0" in text:
        raise ConfigError(f"{key}: holds a NUL character, which no command line or environment "
                          "can carry; remove it")


def _command(raw: Mapping[str, Any], space: Space) -> tuple[tuple[str, ...], FrozenMap]:
    """The command and its environment, every placeholder known (parameters or
    :data:`COMMAND_FIELDS`)."""
    words = raw["command"]
    if not isinstance(words, (list, tuple)) or not words or \
            not all(isinstance(w, str) for w in words):
        raise ConfigError(f"objective.command: expected a non-empty list of strings, e.g. "
                          f'["{{python}}", "train.py", "--lr", "{{lr}}"], got {show(words)}')
    env = require_table(raw.get("env", {}), "objective.env")
    taken = sorted(set(COMMAND_FIELDS) & set(space.names))
    if taken:
        raise ConfigError(f"space.{taken[0]}: the name is a command placeholder "
                          f"({', '.join(COMMAND_FIELDS)}); rename the parameter")
    known = (*space.names, *COMMAND_FIELDS)
    templates = [(f"objective.command[{i}]", w) for i, w in enumerate(words)]
    for name, value in env.items():
        if not name or "=" in name or "\0" in name:
            raise ConfigError(f"objective.env: {show(name)} is not a variable name (empty, or "
                              "holding '=' or NUL); name it e.g. OMP_NUM_THREADS")
        if not isinstance(value, str):
            raise ConfigError(f"objective.env.{name}: expected a string, got {show(value)}")
        templates.append((f"objective.env.{name}", value))
    samples = _samples(space)
    for key, text in templates:
        _check_text(text, key)
        for field_name in _placeholders(text, key):
            if field_name not in known:
                raise ConfigError(f"{key}: unknown placeholder {{{field_name}}}; known: "
                                  f"{', '.join('{' + k + '}' for k in known)}")
        _check_formats(text, key, samples)
    return tuple(words), FrozenMap({str(k): v for k, v in env.items()})


def objective_and_space(table: Mapping[str, Any]) -> tuple[ObjectiveConfig, Space]:
    raw = require_table(table.get("objective", {}), "objective")
    check_keys(raw, _OBJECTIVE_KEYS, "objective")
    if "command" in raw:
        return _command_objective(raw, table)
    extra = [k for k in _COMMAND_ONLY if k in raw]
    if extra:
        raise ConfigError(f"objective.{extra[0]}: only a command objective takes it; add "
                          "objective.command or remove the key")
    name = _objective_name(raw.get("name", ObjectiveConfig.name))
    data_dir = string_value(raw.get("data_dir", ""), "objective.data_dir")
    options = freeze(require_table(raw.get("options", {}), "objective.options"),
                     "objective.options")
    direction = one_of(*DIRECTIONS)(raw.get("direction", ObjectiveConfig.direction),
                                    "objective.direction")
    dimensions = raw.get("dimensions")
    if dimensions is not None:
        dimensions = DIMENSIONS(dimensions, "objective.dimensions")
        if not is_builtin(name):
            raise ConfigError(f"objective.dimensions: only a built-in benchmark takes dimensions, "
                              f"got {dimensions} for {name!r}; describe its [space] instead")
        if "space" in table:
            raise ConfigError(f"objective.dimensions: given together with [space] (got "
                              f"{dimensions}); drop one: [space] already sets the parameters")
    if "space" in table:
        space = Space.from_dict(table["space"], prefix="space")
        if is_builtin(name):
            _check_numeric(space, name)
    elif is_builtin(name):
        space = builtin_space(name, dimensions or DEFAULT_DIMENSIONS)
    else:
        raise ConfigError(f"space: missing; objective {name!r} needs [space.NAME] tables, "
                          "e.g. [space.lr] type = \"float\", low = 1e-4, high = 1e-1, log = true")
    dims = len(space) if is_builtin(name) else None
    return ObjectiveConfig(name, dims, data_dir, options, direction), space


def _command_objective(raw: Mapping[str, Any],
                       table: Mapping[str, Any]) -> tuple[ObjectiveConfig, Space]:
    for key in ("name", "dimensions"):
        if key in raw:
            raise ConfigError(f"objective.{key}: a command objective takes no {key}; remove it "
                              "or remove objective.command")
    if "space" not in table:
        raise ConfigError("space: missing; a command objective needs [space.NAME] tables, "
                          "e.g. [space.lr] type = \"float\", low = 1e-4, high = 1e-1, log = true")
    space = Space.from_dict(table["space"], prefix="space")
    command, env = _command(raw, space)
    return ObjectiveConfig(
        name=COMMAND, data_dir=string_value(raw.get("data_dir", ""), "objective.data_dir"),
        options=freeze(require_table(raw.get("options", {}), "objective.options"),
                       "objective.options"),
        direction=one_of(*DIRECTIONS)(raw.get("direction", ObjectiveConfig.direction),
                                      "objective.direction"),
        command=command, env=env,
        result_metric=string_value(raw.get("result_metric", ""), "objective.result_metric"),
        stop_grace=seconds(strict=False)(raw.get("stop_grace", ObjectiveConfig.stop_grace),
                                         "objective.stop_grace"),
        results=one_of(*RESULTS_FROM)(raw.get("results", ObjectiveConfig.results),
                                      "objective.results")), space


def builtin_space(name: str, dimensions: int) -> Space:
    """The space a built-in gets without a [space]: x0..x{n-1} over the benchmark's bounds."""
    low, high = BUILTINS[name]
    return Space(tuple(FloatParam(f"x{i}", low, high) for i in range(dimensions)))


def _check_numeric(space: Space, name: str) -> None:
    """A benchmark reads every parameter as a number, so a string choice can never work."""
    for param in space.params:
        choices = getattr(param, "choices", ())
        if any(isinstance(c, str) for c in choices):
            raise ConfigError(f"{key_path('space', param.name)}: built-in {name!r} needs numbers, "
                              f"got {param.kind} choices {show(list(choices))}")


