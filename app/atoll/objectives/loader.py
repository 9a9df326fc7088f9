"""Finding the objective a config names: a built-in, or ``package.module:function``."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from atoll.errors import ObjectiveError
from atoll.objectives.benchmarks import BENCHMARKS


def load_objective(name: str) -> Callable[..., Any]:
    """Return the callable ``objective(params, ctx)``; imports only the module the user names."""
    if name in BENCHMARKS:
        return BENCHMARKS[name]
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise ObjectiveError(f"objective.name: {name!r} is neither a built-in "
                             f"({', '.join(sorted(BENCHMARKS))}) nor 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ObjectiveError(f"objective.name: cannot import module {module_name!r} ({exc}); "
                             "check the name and that it is on PYTHONPATH") from None
    except Exception as exc:  # noqa: BLE001 - a broken user module is bad input, not a crash
        raise ObjectiveError(f"objective.name: importing {module_name!r} failed with "
                             f"{type(exc).__name__}: {exc}") from None
    try:
        function = getattr(module, attr)
    except AttributeError:
        raise ObjectiveError(f"objective.name: module {module_name!r} has no attribute "
                             f"{attr!r}") from None
    if not callable(function):
        raise ObjectiveError(f"objective.name: {name!r} is a {type(function).__name__}, not "
                             "a function; name a callable objective(params, ctx)")
    return function
