"""Where a config's raw table comes from: a TOML file or the embedded default, then the
``--set KEY=VALUE`` overrides, before any validation."""

from __future__ import annotations

import copy
import functools
import importlib.resources
import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from atoll.config.checks import show
from atoll.config.objective import DEFAULT_DIMENSIONS, DIMENSIONS, builtin_space, is_builtin
from atoll.config.sections import DEFAULT_CONFIG
from atoll.errors import ConfigError
from atoll.space import key_path


def read_table(path: str | os.PathLike[str] | None) -> dict[str, Any]:
    """The raw TOML table of ``path`` (None: the embedded default), before any validation."""
    if path is None:
        label = f"<embedded {DEFAULT_CONFIG}>"
        text = importlib.resources.files("atoll").joinpath(DEFAULT_CONFIG).read_text("utf-8")
    else:
        label = os.fspath(path)
        text = _read_text(label)
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{label}: invalid TOML: {err}") from None
    if not table:  # a file cut short or written to the wrong place: never the default unasked
        raise ConfigError(f"{label}: the config file sets nothing (empty, or comments only); "
                          "write the search in it, or leave out --config to run the embedded "
                          "default")
    return table


def _read_text(path: str) -> str:
    try:
        return Path(path).read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") \
            from None
    except (OSError, ValueError) as err:  # ValueError: a NUL byte in the path
        reason = getattr(err, "strerror", None) or err
        raise ConfigError(f"{path}: cannot read the config file: {reason}") from None


def apply_overrides(table: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A deep copy of ``table`` with each ``KEY=VALUE`` (dotted key, TOML value) set in order."""
    result = copy.deepcopy(dict(table))
    for item in overrides:
        key, value = _parse_override(item)
        if key[0] == "space" and "space" not in result:
            _materialize_builtin_space(result)
        _set(result, key, value)
    return result


def _parse_override(item: str) -> tuple[list[str], Any]:
    """``'a.b=VALUE'`` -> (['a', 'b'], value); VALUE as TOML, else as a plain string."""
    key, equals, text = item.partition("=")
    parts = [part.strip() for part in key.split(".")]
    if not equals or not all(parts):
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. search.islands=2")
    try:
        parsed = tomllib.loads(f"v = {text}")
    except tomllib.TOMLDecodeError:
        return parts, text
    return parts, parsed["v"] if list(parsed) == ["v"] else text


def _set(table: dict[str, Any], key: list[str], value: Any) -> None:
    for depth, part in enumerate(key[:-1]):
        inner = table.setdefault(part, {})
        if not isinstance(inner, dict):
            full, where = (functools.reduce(key_path, parts, "")
                           for parts in (key, key[: depth + 1]))
            raise ConfigError(f"{full}: cannot set a key inside {where}, which is "
                              f"{show(inner)}, not a table")
        table = inner
    table[key[-1]] = value


def _materialize_builtin_space(table: dict[str, Any]) -> None:
    """Write out a built-in's generated space so that ``--set space.x0.high=3`` can edit it."""
    objective = table.get("objective", {})
    if not isinstance(objective, dict) or not is_builtin(objective.get("name", "sphere")):
        return
    dimensions = DIMENSIONS(objective.pop("dimensions", DEFAULT_DIMENSIONS),
                            "objective.dimensions")
    table["space"] = builtin_space(objective.get("name", "sphere"), dimensions).to_dict()


