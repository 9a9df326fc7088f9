"""The sections of a run configuration as frozen dataclasses, with their defaults and the
values their keys allow."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from atoll.config.frozen import FrozenMap
from atoll.space import Space

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

    def for_island(self, strategy: str) -> MigrationConfig:
        """What an island running ``strategy`` sends: a PBT island copies its emigrants, since
        its members are lineages that train on at home (a move would end one there)."""
        return replace(self, mode="pollination") if strategy == "pbt" else self


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


