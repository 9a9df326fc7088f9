"""The GA: Propulate's genetic algorithm, as a pipeline of Atoll operators, with the success rule
adapting its step; and the strategy each island runs (by default the hybrid of CMA-ES and this
GA, :mod:`atoll.evolution.hybrid`)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from atoll.config import SELECTIONS, EvolutionConfig, InheritConfig, PbtConfig
from atoll.evolution.base import Compose, Conditional, Propagator, check_count
from atoll.evolution.crossover import CrossoverUniform
from atoll.evolution.inherit import Inheriting
from atoll.evolution.init import InitUniform
from atoll.evolution.mutation import IntervalMutationNormal, PointMutation, interval_params
from atoll.evolution.selection import SelectBest, SelectTournament, SelectUniform
from atoll.evolution.step_size import StepScale, SuccessRule
from atoll.evolution.strategy import Strategy
from atoll.individual import Individual
from atoll.space import Space


def default_propagator(space: Space, population_size: int,
                       settings: EvolutionConfig | None = None,
                       scale: StepScale | None = None) -> Propagator:
    """Breed one individual: random ones until the population is full, then select and vary.

    ``settings`` is the config's ``[evolution]`` (its defaults when None; its
    ``population_size`` is resolved by the caller). Pipeline once full: pool selection
    (``population_size`` individuals) -> 2 parents uniformly -> uniform crossover
    (``crossover``) -> point mutation (``mutation``) -> Gaussian interval mutation (probability
    1, as in Propulate's ``get_default_propagator``) -> replacement by a random individual
    (``random_init``). Like Propulate, the interval step is left out when the
    space has nothing it can move. Where Atoll differs from Propulate:

    - the interval mutation also moves ints and ordinals, in unit (log for log floats) space;
    - a point mutation never redraws the current value of a discrete parameter;
    - ``selection`` picks the pool: "best" (Propulate's ``SelectMin``; here it relies on the
      population arriving sorted), "uniform" or "tournament" (size ``tournament_size``);
    - ``population_size`` must be at least 2, since crossover needs two distinct parents;
    - the Gaussian step is ``sigma_factor`` times ``scale`` (1 when None), which
      :func:`ga_strategy`'s success rule adapts when ``sigma_rule = "success"``.
    """
    if settings is None:
        settings = EvolutionConfig()
    check_count("population_size", population_size, minimum=2)
    if settings.selection not in SELECTIONS:
        raise ValueError(f"selection must be one of {', '.join(map(repr, SELECTIONS))}, "
                         f"got {settings.selection!r}")
    movable = interval_params(space)
    steps: list[Propagator] = [
        _pool(settings.selection, population_size, settings.tournament_size),
        SelectUniform(2),
        CrossoverUniform(settings.crossover),
        PointMutation(space, settings.mutation),
    ]
    if movable:
        steps.append(IntervalMutationNormal(space, settings.sigma_factor, probability=1.0,
                                            scale=scale))
    steps.append(InitUniform(space, settings.random_init))
    return Conditional(population_size, Compose(steps), InitUniform(space))


class GA:
    """The GA as a strategy: a pure pipeline, and optionally the success rule that judges its
    children when their results are told and scales its step."""

    def __init__(self, breed: Propagator, rule: SuccessRule | None = None) -> None:
        self.breed = breed
        self.rule = rule

    def __repr__(self) -> str:
        return f"GA({self.breed!r}, rule={self.rule!r})"

    def ask(self, ranked: Sequence[Individual], rng: random.Random, ident: int) -> Individual:
        child = self.breed(ranked, rng)[0]
        child.id = ident
        if self.rule is not None:
            self.rule.expect(child, ranked)
        return child

    def tell(self, result: Individual) -> None:
        if self.rule is not None:
            self.rule.tell(result)


def ga_strategy(space: Space, population_size: int,
                settings: EvolutionConfig | None = None) -> GA:
    """The default propagator, its step adapted by the 1/5th success rule
    (:mod:`atoll.evolution.step_size`) when ``sigma_rule = "success"`` (the default) and the
    space has parameters it can move; "fixed" keeps ``sigma_factor``, as Propulate."""
    if settings is None:
        settings = EvolutionConfig()
    movable = interval_params(space)
    if settings.sigma_rule != "success" or not movable:
        return GA(default_propagator(space, population_size, settings))
    scale = StepScale()
    return GA(default_propagator(space, population_size, settings, scale),
              SuccessRule(scale, settings.sigma_factor, population_size, len(movable)))


def _pool(selection: str, population_size: int, tournament_size: int) -> Propagator:
    if selection == "best":
        return SelectBest(population_size)
    if selection == "uniform":
        return SelectUniform(population_size)
    return SelectTournament(population_size, tournament_size)


def island_strategy(space: Space, island: int, island_workers: int,
                    settings: EvolutionConfig, inherit: InheritConfig | None = None,
                    pbt: PbtConfig | None = None, worker: int = 0,
                    partial: bool = False) -> Strategy:
    """The strategy of ``worker`` on ``island``: the island's strategy (``evolution.strategy``
    or its entry in ``evolution.island_strategies``): the GA, CMA-ES, both (hybrid), or PBT.
    The GA's and PBT's population is ``population_size`` or 2 x the island's workers; CMA-ES
    keeps its own default. With ``inherit.enabled``, bred children start from their better
    parent's checkpoint (PBT's always start from a member's). With ``partial`` (successive
    halving's rungs), CMA-ES learns pruned and paused results too (:mod:`atoll.evolution.cma`)."""
    strategy = settings.strategy_of(island)
    ga_population = settings.population_size or 2 * island_workers
    inherit = inherit or InheritConfig()
    if strategy == "pbt":
        from atoll.evolution.pbt import PBT

        return PBT(space, ga_population, worker, pbt, inherit.shape_params, inherit.keep)
    chosen = _breeding(space, strategy, ga_population, settings, partial)
    return Inheriting(chosen, inherit.shape_params) if inherit.enabled else chosen


def _breeding(space: Space, strategy: str, ga_population: int,
              settings: EvolutionConfig, partial: bool) -> Strategy:
    if strategy == "ga":
        return ga_strategy(space, ga_population, settings)
    from atoll.evolution.cma import CMAES  # imported only where an island runs CMA-ES

    if strategy == "cmaes":
        return CMAES(space, partial=partial)
    from atoll.evolution.hybrid import Hybrid

    return Hybrid(CMAES(space, partial=partial), ga_strategy(space, ga_population, settings))
