"""The run configuration: a TOML file plus ``--set KEY=VALUE`` overrides, validated once.

Nothing else in Atoll reads raw config: this module turns it into frozen dataclasses, and
every mistake into one :class:`~atoll.errors.ConfigError` line that names the dotted key, the bad
value and what is allowed. It imports only the standard library, numpy and Atoll's light
modules, so reading a config never imports torch or starts MPI.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import difflib
import functools
import importlib.resources
import math
import os
import string
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atoll.errors import ConfigError
from atoll.space import INT64_MAX, FloatParam, Space, key_path

DEFAULT_CONFIG = "default.toml"
"""The embedded default (``atoll`` package data), used when no file is given."""
MIGRATION_MODES = ("migration", "pollination")
"""``migration`` moves individuals to another island, ``pollination`` sends copies."""
BACKENDS = ("auto", "gloo", "nccl")
"""Torch process-group backends: ``auto`` is NCCL with CUDA devices, gloo otherwise."""
STRATEGIES = ("ga", "cmaes", "hybrid", "pbt")
"""How an island breeds: ``ga`` the genetic algorithm (Propulate's), ``cmaes`` asynchronous
CMA-ES (:mod:`atoll.evolution.cma`), ``hybrid`` both on one population, each candidate from the
one recently more successful (:mod:`atoll.evolution.hybrid`), ``pbt`` population-based training
(:mod:`atoll.evolution.pbt`)."""
SIGMA_RULES = ("fixed", "success")
"""The GA's Gaussian step: ``fixed`` at ``sigma_factor`` (Propulate's), ``success`` adapted per
worker by the 1/5th success rule (:mod:`atoll.evolution.step_size`)."""
SELECTIONS = ("best", "uniform", "tournament")
"""The GA's breeding pools (``evolution.selection``)."""
BUILTINS = {"sphere": (-5.12, 5.12), "rosenbrock": (-2.048, 2.048), "rastrigin": (-5.12, 5.12),
            "ackley": (-32.768, 32.768), "griewank": (-600.0, 600.0),
            "schwefel": (-500.0, 500.0), "step": (-5.12, 5.12)}
"""The built-in benchmark objectives (:mod:`atoll.objectives.benchmarks`) with the bounds of
the space they get when a config gives none."""
DIRECTIONS = ("minimize", "maximize")
"""Whether the objective's value is a loss (lower is better) or a score (higher is better)."""


class FrozenMap(Mapping[str, Any]):
    """A read-only mapping that, unlike ``types.MappingProxyType``, can be pickled: a Config is
    planned once on rank 0 and broadcast to the other ranks as it is."""

    def __init__(self, items: Mapping[str, Any]) -> None:
        self._items = dict(items)

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    # The dict's own lookups: Mapping's mixins go through __getitem__ and an exception for a
    # missing key, and an objective reads its options on every evaluation.
    def get(self, key: str, default: Any = None) -> Any:
        return self._items.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __repr__(self) -> str:
        return repr(self._items)


@dataclass(frozen=True)
class ObjectiveConfig:
    """What to evaluate. ``dimensions`` is the parameter count of a built-in, None otherwise."""

    name: str = "sphere"
    dimensions: int | None = None
    data_dir: str = ""
    options: Mapping[str, Any] = field(default_factory=lambda: FrozenMap({}), hash=False)
    direction: str = "minimize"
    """With ``maximize`` the search minimizes the negated value: the engine and the record's
    ``loss`` column stay lower-is-better, and the views show the objective's own value."""
    config_dir: str = field(default="", compare=False)
    """The config file's directory, where a ``module:function`` objective may also live (not
    part of the recorded config: it is where the file was, not what it says)."""
    command: tuple[str, ...] = ()
    """A command objective (``name`` is then ``command``): the program and its arguments, with
    ``{placeholders}`` (:data:`COMMAND_FIELDS` and the parameters' names)."""
    env: Mapping[str, str] = field(default_factory=lambda: FrozenMap({}), hash=False)
    """Environment variables the command gets (values may hold placeholders too)."""
    result_metric: str = ""
    """The reported metric whose last value is the command's value when it prints no
    ``ATOLL result=`` line ("": the line is required)."""
    stop_grace: float = 10.0
    """Seconds a command has between SIGTERM and SIGKILL when its evaluation is stopped."""
    results: str = "stdout"
    """Where a command's ``ATOLL`` lines are read: its ``stdout``, or the ``file`` named by its
    ``ATOLL_RESULTS_FILE`` (for scripts whose stdout is not theirs to shape)."""


@dataclass(frozen=True)
class SearchConfig:
    """The budget and the rank layout of one run."""

    generations: int = 100
    """Evaluations per worker when ``evaluations`` is 0: a new run's budget is this times the
    workers of its first job."""
    max_evaluations: int = 0
    """A cap on the run's budget (0: none)."""
    wall_time: float = 0.0
    """Seconds per job (0: none); the job then stops like on a signal, exit code 75."""
    ranks_per_worker: int = 1
    islands: int = 1
    eval_timeout: float = 0.0
    """Seconds per evaluation (0: none); see the README for where it cannot act."""
    evaluations: int = 0
    """The run's total budget of completed evaluations, the same under any rank layout (0: use
    generations). A resume may raise it to extend a run."""
    give_up_after: int = 10
    """A job stops (exit code 70) once this many of its evaluations failed while none of the
    run's has succeeded yet: a broken objective does not burn the budget (0: never)."""


@dataclass(frozen=True)
class EvolutionConfig:
    """The default propagator's knobs."""

    population_size: int = 0
    crossover: float = 0.7
    mutation: float = 0.4
    random_init: float = 0.1
    sigma_factor: float = 0.05
    selection: str = "best"
    tournament_size: int = 3
    strategy: str = "hybrid"
    """Every island's strategy, unless ``island_strategies`` names one per island: by default
    CMA-ES and the GA on each island, since which one a landscape favours is rarely known in
    advance (README, "Which strategy")."""
    island_strategies: tuple[str, ...] = ()
    sigma_rule: str = "success"
    """``fixed``: every Gaussian step has ``sigma_factor``; ``success``: each worker adapts it
    by the 1/5th success rule (atoll.evolution.step_size)."""

    def strategy_of(self, island: int) -> str:
        """The strategy island ``island`` runs."""
        return self.island_strategies[island] if self.island_strategies else self.strategy


PRUNING_RULES = ("none", "median", "halving", "asha")
"""``median``: stop an evaluation whose metric at an epoch is worse than the median of what
completed individuals had there (:mod:`atoll.scheduling.median`); ``halving``: successive
halving, stop one not among the best ``1/eta`` at a rung (:mod:`atoll.scheduling.halving`);
``asha``: successive halving's promotion form, pause such an evaluation with its checkpoint
and continue it once it qualifies (:mod:`atoll.scheduling.asha`)."""


@dataclass(frozen=True)
class PruningConfig:
    """Stopping evaluations early from their per-epoch curves (off by default)."""

    rule: str = "none"
    metric: str = "val_loss"
    """The ``ctx.report`` metric the rule compares."""
    direction: str = "minimize"
    """Whether lower (a loss) or higher (an accuracy) values of ``metric`` are better."""
    warmup_epochs: int = 1
    """Epochs ``0 .. warmup_epochs - 1`` are never pruned."""
    min_completed: int = 5
    """Median rule: completed individuals that must have reported an epoch before it is judged."""
    eta: int = 3
    """Successive halving (both forms): the rungs' spacing factor; the best ``1/eta`` at a rung
    go on."""
    min_epochs: int = 1
    """Successive halving (both forms): epochs before the first rung (rungs after
    ``min_epochs * eta**k``)."""
    max_epochs: int = 0
    """Successive halving (both forms): the epochs a full evaluation trains (0: not said); its
    last epoch is then no rung, so nothing pauses or stops having trained them all."""

    @property
    def active(self) -> bool:
        return self.rule != "none"

    @property
    def rungs(self) -> bool:
        """Whether the rule judges at rungs (successive halving, both forms): most evaluations
        then end early, and CMA-ES learns from them too."""
        return self.rule in ("halving", "asha")

    @property
    def pauses(self) -> bool:
        """Whether the rule pauses evaluations for promotion (needs their checkpoints)."""
        return self.rule == "asha"


@dataclass(frozen=True)
class MigrationConfig:
    """How individuals travel between islands."""

    mode: str = "migration"
    probability: float = 0.1
    migrants: int = 1

    @property
    def moves(self) -> bool:
        """Whether emigrants leave their island (migration) or are copied (pollination)."""
        return self.mode == "migration"


@dataclass(frozen=True)
class RecordConfig:
    """How results reach disk."""

    flush_interval: float = 5.0
    top_models: int = 5  # weights kept of the best individuals whose objective offers them
    checkpoint_limit_mb: float = 0.0  # total size of RUN_DIR/checkpoints; 0: no limit


@dataclass(frozen=True)
class InheritConfig:
    """Bred children that start from a parent's checkpoint, and the checkpoints kept for it."""

    enabled: bool = False
    """A GA child starts from its better parent's checkpoint (PBT islands always inherit)."""
    keep: int = 4
    """Checkpoints of finished individuals kept per island while inheritance is on: the island's
    best ``keep``; the others are deleted when they drop out."""
    shape_params: tuple[str, ...] = ()
    """Parameters that change the model's shapes: a GA child inherits only from a parent with
    the same values, and PBT never perturbs them."""


@dataclass(frozen=True)
class PbtConfig:
    """Population-based training's exploit and explore (:mod:`atoll.evolution.pbt`)."""

    fraction: float = 0.25
    """Truncation: a member in the bottom ``fraction`` copies one of the top ``fraction``."""
    resample: float = 0.25
    """Probability that a copied parameter is drawn anew from the space instead of perturbed."""
    perturb: float = 0.2
    """A perturbed float is multiplied by ``1 - perturb`` or ``1 + perturb``."""


@dataclass(frozen=True)
class DistributedConfig:
    """The torch process group of each multi-rank worker (made only if an objective asks)."""

    backend: str = "auto"  # nccl with CUDA devices, gloo otherwise
    timeout: float = 60.0  # seconds for the rendezvous and for any collective


@dataclass(frozen=True)
class Config:
    """One validated run configuration."""

    seed: int
    objective: ObjectiveConfig
    space: Space
    search: SearchConfig
    evolution: EvolutionConfig
    migration: MigrationConfig
    record: RecordConfig
    distributed: DistributedConfig = DistributedConfig()
    pruning: PruningConfig = PruningConfig()
    inherit: InheritConfig = InheritConfig()
    pbt: PbtConfig = PbtConfig()

    @property
    def inherits(self) -> bool:
        """Whether children may start from a parent's checkpoint (inherit.enabled, or an island
        runs PBT): checkpoints of the islands' best individuals are then kept."""
        islands = self.evolution.island_strategies or (self.evolution.strategy,)
        return self.inherit.enabled or "pbt" in islands


# --- value checkers: (value, dotted key) -> the validated value, or a ConfigError --------------

Check = Callable[[Any, str], Any]


def _show(value: Any) -> str:
    """A value as the user wrote it, on one line and not too long."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


MAX_EVALUATIONS = 10**12
"""The largest budget a run may have: ids (``next id + generation x workers + worker``) stay
far inside int64, and a typo such as ``generations = 4611686018427387904`` is refused."""
MAX_COUNT = 10**6
"""The largest islands, ranks per worker, population, migrants, tournament or kept models."""
MAX_SECONDS = 1e7
"""The longest wall time, evaluation timeout, flush interval or process-group timeout: about
116 days, within what the operating system's timers accept."""


def _integer(minimum: int, maximum: int = INT64_MAX) -> Check:
    def check(value: Any, key: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(f"{key}: expected an integer >= {minimum}, got {_show(value)}")
        if value > maximum:
            raise ConfigError(f"{key}: expected an integer <= {maximum:,}, got {value:,}")
        return value

    return check


def _number(minimum: float, *, strict: bool, maximum: float = math.inf) -> Check:
    """A finite real up to ``maximum``; ``strict`` excludes the minimum itself."""
    allowed = f"a number {'>' if strict else '>='} {minimum:g}"
    if math.isfinite(maximum):
        allowed += f" and at most {maximum:g} (seconds: about {maximum / 86400:.0f} days)"

    def check(value: Any, key: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected {allowed}, got {_show(value)}")
        try:
            real = float(value)
        except OverflowError:
            raise ConfigError(f"{key}: expected {allowed}, got {value} (too large)") from None
        if not math.isfinite(real) or real < minimum or (strict and real == minimum) \
                or real > maximum:
            raise ConfigError(f"{key}: expected {allowed}, got {_show(value)}")
        return real

    return check


def _seconds(*, strict: bool) -> Check:
    return _number(0.0, strict=strict, maximum=MAX_SECONDS)


def _probability(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not 0.0 <= value <= 1.0:
        raise ConfigError(f"{key}: expected a probability in [0, 1], got {_show(value)}")
    return float(value)


def _boolean(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{key}: expected true or false, got {_show(value)}")
    return value


def _names(value: Any, key: str) -> tuple[str, ...]:
    """A list of parameter names (checked against the space once it is known)."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{key}: expected a list of parameter names, got {_show(value)}")
    return tuple(value)


def _open_unit(maximum: float) -> Check:
    """A number in (0, ``maximum``]."""
    def check(value: Any, key: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not 0.0 < value <= maximum:
            raise ConfigError(f"{key}: expected a number > 0 and <= {maximum:g}, "
                              f"got {_show(value)}")
        return float(value)

    return check


def _string(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{key}: expected a string, got {_show(value)}")
    return value


def _one_of(*options: str) -> Check:
    def check(value: Any, key: str) -> str:
        if not isinstance(value, str) or value not in options:
            close = difflib.get_close_matches(value, options, n=1) if isinstance(value, str) \
                else []
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{key}: expected one of {', '.join(map(repr, options))}, "
                              f"got {_show(value)}{hint}")
        return value

    return check


def _population_size(value: Any, key: str) -> int:
    """0 means "2 x the island's workers"; otherwise crossover needs at least two parents."""
    size = _integer(0, MAX_COUNT)(value, key)
    if size == 1:
        raise ConfigError(f"{key}: expected 0 (2 x the workers of an island) or >= 2, got 1")
    return size


def _strategies(value: Any, key: str) -> tuple[str, ...]:
    """One strategy per island, or an empty list (every island runs ``evolution.strategy``)."""
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{key}: expected a list of strategies, one per island (each one of "
                          f"{', '.join(map(repr, STRATEGIES))}), got {_show(value)}")
    check = _one_of(*STRATEGIES)
    return tuple(check(item, f"{key}[{i}]") for i, item in enumerate(value))


# --- the schema: section -> {key: checker}; defaults come from the dataclasses -----------------

_SECTIONS: dict[str, tuple[type, dict[str, Check]]] = {
    "search": (SearchConfig, {
        "evaluations": _integer(0, MAX_EVALUATIONS), "generations": _integer(1, MAX_EVALUATIONS),
        "max_evaluations": _integer(0, MAX_EVALUATIONS),
        "wall_time": _seconds(strict=False), "ranks_per_worker": _integer(1, MAX_COUNT),
        "islands": _integer(1, MAX_COUNT), "eval_timeout": _seconds(strict=False),
        "give_up_after": _integer(0, MAX_EVALUATIONS)}),
    "evolution": (EvolutionConfig, {
        "population_size": _population_size, "crossover": _probability, "mutation": _probability,
        "random_init": _probability, "sigma_factor": _number(0.0, strict=True),
        "sigma_rule": _one_of(*SIGMA_RULES), "selection": _one_of(*SELECTIONS),
        "tournament_size": _integer(2, MAX_COUNT),
        "strategy": _one_of(*STRATEGIES), "island_strategies": _strategies}),
    "migration": (MigrationConfig, {
        "mode": _one_of(*MIGRATION_MODES), "probability": _probability,
        "migrants": _integer(1, MAX_COUNT)}),
    "record": (RecordConfig, {"flush_interval": _seconds(strict=True),
                              "top_models": _integer(0, MAX_COUNT),
                              "checkpoint_limit_mb": _number(0.0, strict=False)}),
    "pruning": (PruningConfig, {
        "rule": _one_of(*PRUNING_RULES), "metric": _string,
        "direction": _one_of(*DIRECTIONS), "warmup_epochs": _integer(0, MAX_COUNT),
        "min_completed": _integer(1, MAX_COUNT), "eta": _integer(2, MAX_COUNT),
        "min_epochs": _integer(1, MAX_COUNT), "max_epochs": _integer(0, MAX_COUNT)}),
    "distributed": (DistributedConfig, {
        "backend": _one_of(*BACKENDS), "timeout": _seconds(strict=True)}),
    "inherit": (InheritConfig, {
        "enabled": _boolean, "keep": _integer(1, MAX_COUNT), "shape_params": _names}),
    "pbt": (PbtConfig, {
        "fraction": _open_unit(0.5), "resample": _probability, "perturb": _open_unit(0.99)}),
}
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
_TOP_KEYS = ("seed", "objective", "space", *_SECTIONS)
_DIMENSIONS = _integer(1)
_DEFAULT_DIMENSIONS = 2


def _check_keys(table: Mapping[str, Any], allowed: Sequence[str], prefix: str) -> None:
    """Reject unknown keys, suggesting the closest known one (or where a stray key belongs)."""
    for name in table:
        if name in allowed:
            continue
        name = str(name)
        close = difflib.get_close_matches(name, allowed, n=1)
        homes = [f"{s}.{name}" for s, (_, keys) in _SECTIONS.items() if name in keys]
        if close:
            hint = f"did you mean {close[0]!r}?"
        elif not prefix and homes:
            hint = f"did you mean {homes[0]!r}?"
        else:
            hint = f"allowed: {', '.join(allowed)}"
        raise ConfigError(f"{key_path(prefix, name)}: unknown key; {hint}")


def _table(value: Any, key: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: expected a table, got {_show(value)}")
    return value


def _section(table: Mapping[str, Any], name: str) -> Any:
    cls, checks = _SECTIONS[name]
    raw = _table(table.get(name, {}), name)
    _check_keys(raw, tuple(checks), name)
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    return cls(**{k: check(raw.get(k, defaults[k]), f"{name}.{k}")
                  for k, check in checks.items()})


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
    name = _string(value, "objective.name")
    if is_builtin(name) or _is_reference(name):
        return name
    close = difflib.get_close_matches(name, list(BUILTINS), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"objective.name: {_show(name)} is neither a built-in "
                      f"({', '.join(sorted(BUILTINS))}) nor 'package.module:function'{hint}")


_TOML_SCALARS = (str, int, float, bool, datetime.date, datetime.time)  # datetime is a date


def _freeze(value: Any, key: str) -> Any:
    """A read-only deep copy of TOML data: tables become FrozenMaps, arrays tuples, dates and
    times ISO 8601 strings."""
    if isinstance(value, Mapping):
        return FrozenMap(
            {str(k): _freeze(v, key_path(key, str(k))) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v, f"{key}[{i}]") for i, v in enumerate(value))
    if not isinstance(value, _TOML_SCALARS):
        raise ConfigError(f"{key}: {_show(value)} is not a TOML value")
    if isinstance(value, (datetime.date, datetime.time)):
        # As ISO 8601 text: the run's record stores its config as JSON, which has no dates, and a
        # rerun or resume must see the very same options.
        return value.isoformat()
    return value


def _thaw(value: Any) -> Any:
    """The plain dicts and lists :func:`_freeze` came from."""
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


def _placeholders(text: str, key: str) -> list[str]:
    """The ``{name}`` fields of one command word (``{{`` and ``}}`` are literal braces)."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
    except ValueError as err:
        raise ConfigError(f"{key}: {_show(text)} is not a valid template ({err}); write a "
                          "literal brace as {{ or }}") from None
    for name in fields:
        if not name.isidentifier():
            raise ConfigError(f"{key}: placeholder {{{name}}} in {_show(text)} is not a name")
    return fields


def _command(raw: Mapping[str, Any], space: Space) -> tuple[tuple[str, ...], FrozenMap]:
    """The command and its environment, every placeholder known (parameters or
    :data:`COMMAND_FIELDS`)."""
    words = raw["command"]
    if not isinstance(words, (list, tuple)) or not words or \
            not all(isinstance(w, str) for w in words):
        raise ConfigError(f"objective.command: expected a non-empty list of strings, e.g. "
                          f'["{{python}}", "train.py", "--lr", "{{lr}}"], got {_show(words)}')
    env = _table(raw.get("env", {}), "objective.env")
    taken = sorted(set(COMMAND_FIELDS) & set(space.names))
    if taken:
        raise ConfigError(f"space.{taken[0]}: the name is a command placeholder "
                          f"({', '.join(COMMAND_FIELDS)}); rename the parameter")
    known = (*space.names, *COMMAND_FIELDS)
    templates = [(f"objective.command[{i}]", w) for i, w in enumerate(words)]
    for name, value in env.items():
        if not isinstance(value, str):
            raise ConfigError(f"objective.env.{name}: expected a string, got {_show(value)}")
        templates.append((f"objective.env.{name}", value))
    for key, text in templates:
        for field_name in _placeholders(text, key):
            if field_name not in known:
                raise ConfigError(f"{key}: unknown placeholder {{{field_name}}}; known: "
                                  f"{', '.join('{' + k + '}' for k in known)}")
    return tuple(words), FrozenMap({str(k): v for k, v in env.items()})


def _objective_and_space(table: Mapping[str, Any]) -> tuple[ObjectiveConfig, Space]:
    raw = _table(table.get("objective", {}), "objective")
    _check_keys(raw, _OBJECTIVE_KEYS, "objective")
    if "command" in raw:
        return _command_objective(raw, table)
    extra = [k for k in _COMMAND_ONLY if k in raw]
    if extra:
        raise ConfigError(f"objective.{extra[0]}: only a command objective takes it; add "
                          "objective.command or remove the key")
    name = _objective_name(raw.get("name", ObjectiveConfig.name))
    data_dir = _string(raw.get("data_dir", ""), "objective.data_dir")
    options = _freeze(_table(raw.get("options", {}), "objective.options"), "objective.options")
    direction = _one_of(*DIRECTIONS)(raw.get("direction", ObjectiveConfig.direction),
                                     "objective.direction")
    dimensions = raw.get("dimensions")
    if dimensions is not None:
        dimensions = _DIMENSIONS(dimensions, "objective.dimensions")
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
        space = builtin_space(name, dimensions or _DEFAULT_DIMENSIONS)
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
        name=COMMAND, data_dir=_string(raw.get("data_dir", ""), "objective.data_dir"),
        options=_freeze(_table(raw.get("options", {}), "objective.options"),
                        "objective.options"),
        direction=_one_of(*DIRECTIONS)(raw.get("direction", ObjectiveConfig.direction),
                                       "objective.direction"),
        command=command, env=env,
        result_metric=_string(raw.get("result_metric", ""), "objective.result_metric"),
        stop_grace=_seconds(strict=False)(raw.get("stop_grace", ObjectiveConfig.stop_grace),
                                          "objective.stop_grace"),
        results=_one_of(*RESULTS_FROM)(raw.get("results", ObjectiveConfig.results),
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
                              f"got {param.kind} choices {_show(list(choices))}")


# --- public API --------------------------------------------------------------------------------


def parse_config(table: Mapping[str, Any]) -> Config:
    """Validate an already-loaded table (a parsed file, or the copy a run stored for resume)."""
    table = _table(table, "config")
    _check_keys(table, _TOP_KEYS, "")
    objective, space = _objective_and_space(table)
    search, evolution = _section(table, "search"), _section(table, "evolution")
    given = len(evolution.island_strategies)
    if given and given != search.islands:
        raise ConfigError(f"evolution.island_strategies: {given} strategies for search.islands = "
                          f"{search.islands}; give one per island, or none to run "
                          "evolution.strategy on every island")
    inherit = _section(table, "inherit")
    unknown = [name for name in inherit.shape_params if name not in space.names]
    if unknown:
        raise ConfigError(f"inherit.shape_params: {unknown[0]!r} is not a parameter of [space] "
                          f"(parameters: {', '.join(space.names)})")
    return Config(
        seed=_integer(0)(table.get("seed", 0), "seed"),
        objective=objective,
        space=space,
        search=search,
        evolution=evolution,
        migration=_section(table, "migration"),
        record=_section(table, "record"),
        distributed=_section(table, "distributed"),
        pruning=_section(table, "pruning"),
        inherit=inherit,
        pbt=_section(table, "pbt"),
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


def read_table(path: str | os.PathLike[str] | None) -> dict[str, Any]:
    """The raw TOML table of ``path`` (None: the embedded default), before any validation."""
    if path is None:
        label = f"<embedded {DEFAULT_CONFIG}>"
        text = importlib.resources.files("atoll").joinpath(DEFAULT_CONFIG).read_text("utf-8")
    else:
        label = os.fspath(path)
        text = _read_text(label)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{label}: invalid TOML: {err}") from None


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
                              f"{_show(inner)}, not a table")
        table = inner
    table[key[-1]] = value


def _materialize_builtin_space(table: dict[str, Any]) -> None:
    """Write out a built-in's generated space so that ``--set space.x0.high=3`` can edit it."""
    objective = table.get("objective", {})
    if not isinstance(objective, dict) or not is_builtin(objective.get("name", "sphere")):
        return
    dimensions = _DIMENSIONS(objective.pop("dimensions", _DEFAULT_DIMENSIONS),
                             "objective.dimensions")
    table["space"] = builtin_space(objective.get("name", "sphere"), dimensions).to_dict()


def section_default(section: str, key: str) -> Any:
    """The default of ``section.key`` as stored (a run made before the key existed had it)."""
    if section not in _SECTIONS:
        return None
    return _thaw(dataclasses.asdict(_SECTIONS[section][0]())).get(key)


def config_to_dict(config: Config) -> dict[str, Any]:
    """Plain TOML/JSON-safe data with ``parse_config(config_to_dict(c)) == c``.

    The space is always written out (a built-in's generated one too, without ``dimensions``), so
    a stored config does not depend on how this version generates default spaces.
    """
    objective = config.objective
    what: dict[str, Any] = {"name": objective.name}
    if objective.command:
        what = {"command": list(objective.command), "env": _thaw(objective.env),
                "result_metric": objective.result_metric, "stop_grace": objective.stop_grace,
                "results": objective.results}
    return {
        "seed": config.seed,
        "objective": {**what, "data_dir": objective.data_dir,
                      "options": _thaw(objective.options), "direction": objective.direction},
        "space": config.space.to_dict(),
        **{name: _thaw(dataclasses.asdict(getattr(config, name))) for name in _SECTIONS},
    }
