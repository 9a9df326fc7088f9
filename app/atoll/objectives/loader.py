"""Finding the objective a config names: a built-in, or ``package.module:function``."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atoll.errors import ObjectiveError, described
from atoll.objectives.benchmarks import BENCHMARKS

if TYPE_CHECKING:
    from atoll.config import Config


def objective_of(config: Config, run_dir: Path) -> Callable[..., Any]:
    """The objective a config names: a command (``objective.command``), else
    :func:`load_objective` of ``objective.name``."""
    if config.objective.command:
        from atoll.objectives.command import CommandObjective
        return CommandObjective(config, run_dir)
    beside = [config.objective.config_dir] if config.objective.config_dir else []
    return load_objective(config.objective.name, beside)


def load_objective(name: str, beside: Sequence[str] = ()) -> Callable[..., Any]:
    """Return the callable ``objective(params, ctx)``; imports only the module the user names.

    A module that is not on the import path is looked for in the directories ``beside`` (the
    config file's) and in the current directory, as ``python script.py`` users expect; they
    are added after everything else, so they never shadow an installed package."""
    if name in BENCHMARKS:
        return BENCHMARKS[name]
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise ObjectiveError(f"objective.name: {name!r} is neither a built-in "
                             f"({', '.join(sorted(BENCHMARKS))}) nor 'package.module:function'")
    try:
        module = _import(module_name, [*beside, os.getcwd()])
    except ImportError as exc:
        places = ", ".join(dict.fromkeys([*beside, os.getcwd()]))
        raise ObjectiveError(f"objective.name: cannot import module {module_name!r} ({exc}); "
                             f"looked on PYTHONPATH and in {places}: check the name, or put "
                             "the module there or its directory on PYTHONPATH") from None
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001 - bad input
        raise ObjectiveError(f"objective.name: importing {module_name!r} failed with "
                             f"{described(exc)}") from None
    try:
        function = getattr(module, attr)
    except AttributeError:
        raise ObjectiveError(f"objective.name: module {module_name!r} has no attribute "
                             f"{attr!r}") from None
    if not callable(function):
        raise ObjectiveError(f"objective.name: {name!r} is a {type(function).__name__}, not "
                             "a function; name a callable objective(params, ctx)")
    return function


def check_preflight(name: str, objective: Callable[..., Any]) -> Callable[..., Any] | None:
    """The objective's optional ``preflight(options, data_dir, parameter_names)``, checked."""
    check = getattr(objective, "preflight", None)
    if check is not None and not callable(check):
        kind = type(check).__name__
        raise ObjectiveError(f"objective.name: the preflight of {name!r} is "
                             f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}, not a function; "
                             "make it preflight(options, data_dir, parameter_names) or remove it")
    return check


def _import(module_name: str, fallback: Sequence[str]) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.partition(".")[0]
        if exc.name != top:  # found, but something it imports is missing: the user's to fix
            raise
        added = [d for d in dict.fromkeys(fallback) if d and d not in sys.path]
        if not added:
            raise
        sys.path.extend(added)
        importlib.invalidate_caches()
        return importlib.import_module(module_name)
