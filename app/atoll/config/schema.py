"""The schema of the plain sections: each key's checker; defaults come from the dataclasses."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from atoll.config.checks import (
    MAX_COUNT,
    MAX_EVALUATIONS,
    Check,
    boolean,
    integer,
    names,
    number,
    one_of,
    open_unit,
    population_size,
    probability,
    seconds,
    show,
    string_value,
)
from atoll.config.sections import (
    BACKENDS,
    DIRECTIONS,
    MIGRATION_MODES,
    PRUNING_RULES,
    SELECTIONS,
    SIGMA_RULES,
    STRATEGIES,
    DistributedConfig,
    EvolutionConfig,
    InheritConfig,
    MigrationConfig,
    PbtConfig,
    PruningConfig,
    RecordConfig,
    SearchConfig,
)
from atoll.errors import ConfigError
from atoll.space import key_path


def _strategies(value: Any, key: str) -> tuple[str, ...]:
    """One strategy per island, or an empty list (every island runs ``evolution.strategy``)."""
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{key}: expected a list of strategies, one per island (each one of "
                          f"{', '.join(map(repr, STRATEGIES))}), got {show(value)}")
    check = one_of(*STRATEGIES)
    return tuple(check(item, f"{key}[{i}]") for i, item in enumerate(value))


SECTIONS: dict[str, tuple[type, dict[str, Check]]] = {
    "search": (SearchConfig, {
        "evaluations": integer(0, MAX_EVALUATIONS), "generations": integer(1, MAX_EVALUATIONS),
        "max_evaluations": integer(0, MAX_EVALUATIONS),
        "wall_time": seconds(strict=False), "ranks_per_worker": integer(1, MAX_COUNT),
        "islands": integer(1, MAX_COUNT), "eval_timeout": seconds(strict=False),
        "give_up_after": integer(0, MAX_EVALUATIONS)}),
    "evolution": (EvolutionConfig, {
        "population_size": population_size, "crossover": probability, "mutation": probability,
        "random_init": probability, "sigma_factor": number(0.0, strict=True),
        "sigma_rule": one_of(*SIGMA_RULES), "selection": one_of(*SELECTIONS),
        "tournament_size": integer(2, MAX_COUNT),
        "strategy": one_of(*STRATEGIES), "island_strategies": _strategies}),
    "migration": (MigrationConfig, {
        "mode": one_of(*MIGRATION_MODES), "probability": probability,
        "migrants": integer(1, MAX_COUNT)}),
    "record": (RecordConfig, {"flush_interval": seconds(strict=True),
                              "top_models": integer(0, MAX_COUNT),
                              "checkpoint_limit_mb": number(0.0, strict=False)}),
    "pruning": (PruningConfig, {
        "rule": one_of(*PRUNING_RULES), "metric": string_value,
        "direction": one_of(*DIRECTIONS), "warmup_epochs": integer(0, MAX_COUNT),
        "min_completed": integer(1, MAX_COUNT), "eta": integer(2, MAX_COUNT),
        "min_epochs": integer(1, MAX_COUNT), "max_epochs": integer(0, MAX_COUNT)}),
    "distributed": (DistributedConfig, {
        "backend": one_of(*BACKENDS), "timeout": seconds(strict=True)}),
    "inherit": (InheritConfig, {
        "enabled": boolean, "keep": integer(1, MAX_COUNT), "shape_params": names}),
    "pbt": (PbtConfig, {
        "fraction": open_unit(0.5), "resample": probability, "perturb": open_unit(0.99)}),
}
TOP_KEYS = ("seed", "objective", "space", *SECTIONS)


def check_keys(table: Mapping[str, Any], allowed: Sequence[str], prefix: str) -> None:
    """Reject unknown keys, suggesting the closest known one (or where a stray key belongs)."""
    for name in table:
        if name in allowed:
            continue
        name = str(name)
        close = difflib.get_close_matches(name, allowed, n=1)
        homes = [f"{s}.{name}" for s, (_, keys) in SECTIONS.items() if name in keys]
        if close:
            hint = f"did you mean {close[0]!r}?"
        elif not prefix and homes:
            hint = f"did you mean {homes[0]!r}?"
        else:
            hint = f"allowed: {', '.join(allowed)}"
        raise ConfigError(f"{key_path(prefix, name)}: unknown key; {hint}")


def require_table(value: Any, key: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: expected a table, got {show(value)}")
    return value


def section(table: Mapping[str, Any], name: str) -> Any:
    cls, checks = SECTIONS[name]
    raw = require_table(table.get(name, {}), name)
    check_keys(raw, tuple(checks), name)
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    return cls(**{k: check(raw.get(k, defaults[k]), f"{name}.{k}")
                  for k, check in checks.items()})


