"""The run configuration: a TOML file plus ``--set KEY=VALUE`` overrides, validated once.

Nothing else in Atoll reads raw config: this package turns it into frozen dataclasses
(``sections``), and every mistake into one :class:`~atoll.errors.ConfigError` line that names
the dotted key, the bad value and what is allowed (``checks``, ``schema``, ``objective``). It
imports only the standard library, numpy and Atoll's light modules, so reading a config never
imports torch or starts MPI. Everything else imports from here, not from the modules.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from atoll.config.checks import MAX_EVALUATIONS, integer
from atoll.config.frozen import FrozenMap, thaw
from atoll.config.objective import builtin_space, is_builtin, objective_and_space
from atoll.config.reading import apply_overrides, read_table
from atoll.config.schema import SECTIONS, TOP_KEYS, check_keys, require_table, section
from atoll.config.sections import (
    BACKENDS,
    BUILTINS,
    DIRECTIONS,
    MIGRATION_MODES,
    PRUNING_RULES,
    SELECTIONS,
    SIGMA_RULES,
    STRATEGIES,
    Config,
    DistributedConfig,
    EvolutionConfig,
    InheritConfig,
    MigrationConfig,
    ObjectiveConfig,
    PbtConfig,
    PruningConfig,
    RecordConfig,
    SearchConfig,
)
from atoll.errors import ConfigError

__all__ = [
    "BACKENDS", "BUILTINS", "DIRECTIONS", "MAX_EVALUATIONS", "MIGRATION_MODES", "PRUNING_RULES",
    "SELECTIONS", "SIGMA_RULES", "STRATEGIES", "Config", "DistributedConfig", "EvolutionConfig",
    "FrozenMap", "InheritConfig", "MigrationConfig", "ObjectiveConfig", "PbtConfig",
    "PruningConfig", "RecordConfig", "SearchConfig", "apply_overrides", "builtin_space",
    "config_to_dict", "is_builtin", "load_config", "parse_config", "read_table",
    "section_default",
]


def parse_config(table: Mapping[str, Any]) -> Config:
    """Validate an already-loaded table (a parsed file, or the copy a run stored for resume)."""
    table = require_table(table, "config")
    check_keys(table, TOP_KEYS, "")
    objective, space = objective_and_space(table)
    search, evolution = section(table, "search"), section(table, "evolution")
    given = len(evolution.island_strategies)
    if given and given != search.islands:
        raise ConfigError(f"evolution.island_strategies: {given} strategies for search.islands = "
                          f"{search.islands}; give one per island, or none to run "
                          "evolution.strategy on every island")
    inherit = section(table, "inherit")
    unknown = [name for name in inherit.shape_params if name not in space.names]
    if unknown:
        raise ConfigError(f"inherit.shape_params: {unknown[0]!r} is not a parameter of [space] "
                          f"(parameters: {', '.join(space.names)})")
    pruning = section(table, "pruning")
    if pruning.rule in ("halving", "asha") and 0 < pruning.max_epochs <= pruning.min_epochs:
        raise ConfigError(f"pruning.min_epochs: {pruning.min_epochs} is not below "
                          f"pruning.max_epochs = {pruning.max_epochs}, so no rung comes before "
                          f"a full evaluation ends and {pruning.rule!r} would judge nothing; "
                          "lower min_epochs or raise max_epochs")
    return Config(
        seed=integer(0)(table.get("seed", 0), "seed"),
        objective=objective,
        space=space,
        search=search,
        evolution=evolution,
        migration=section(table, "migration"),
        record=section(table, "record"),
        distributed=section(table, "distributed"),
        pruning=pruning,
        inherit=inherit,
        pbt=section(table, "pbt"),
    )


def load_config(path: str | os.PathLike[str] | None,
                overrides: Sequence[str] = ()) -> Config:
    """Read a TOML file (None: the embedded default), apply ``KEY=VALUE`` overrides, validate."""
    config = parse_config(apply_overrides(read_table(path), overrides))
    if path is None:
        return config
    where = str(Path(path).resolve().parent)
    return dataclasses.replace(config, objective=dataclasses.replace(config.objective,
                                                                     config_dir=where))


def section_default(section: str, key: str) -> Any:
    """The default of ``section.key`` as stored (a run made before the key existed had it)."""
    if section not in SECTIONS:
        return None
    return thaw(dataclasses.asdict(SECTIONS[section][0]())).get(key)


def config_to_dict(config: Config) -> dict[str, Any]:
    """Plain TOML/JSON-safe data with ``parse_config(config_to_dict(c)) == c``.

    The space is always written out (a built-in's generated one too, without ``dimensions``), so
    a stored config does not depend on how this version generates default spaces.
    """
    objective = config.objective
    what: dict[str, Any] = {"name": objective.name}
    if objective.command:
        what = {"command": list(objective.command), "env": thaw(objective.env),
                "result_metric": objective.result_metric, "stop_grace": objective.stop_grace,
                "results": objective.results}
    return {
        "seed": config.seed,
        "objective": {**what, "data_dir": objective.data_dir,
                      "options": thaw(objective.options), "direction": objective.direction},
        "space": config.space.to_dict(),
        **{name: thaw(dataclasses.asdict(getattr(config, name))) for name in SECTIONS},
    }
