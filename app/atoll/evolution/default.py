"""The default propagator: Propulate's genetic algorithm, as a pipeline of Atoll operators."""

from __future__ import annotations

from typing import TYPE_CHECKING

from atoll.evolution.base import Compose, Conditional, Propagator, check_count
from atoll.evolution.crossover import CrossoverUniform
from atoll.evolution.init import InitUniform
from atoll.evolution.mutation import IntervalMutationNormal, PointMutation, interval_params
from atoll.evolution.selection import (
    SELECTIONS,
    SelectBest,
    SelectTournament,
    SelectUniform,
)
from atoll.evolution.step_size import StepScale, SuccessRule
from atoll.space import Space

if TYPE_CHECKING:
    from atoll.config import EvolutionConfig


def default_propagator(space: Space, population_size: int,
                       settings: EvolutionConfig | None = None) -> Propagator:
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
    - ``sigma_rule = "success"`` adapts the Gaussian step by the 1/5th success rule
      (:mod:`atoll.evolution.step_size`); "fixed" keeps ``sigma_factor``, as Propulate.
    """
    if settings is None:
        from atoll.config import EvolutionConfig

        settings = EvolutionConfig()
    check_count("population_size", population_size, minimum=2)
    if settings.selection not in SELECTIONS:
        raise ValueError(f"selection must be one of {', '.join(map(repr, SELECTIONS))}, "
                         f"got {settings.selection!r}")
    movable = interval_params(space)
    scale = StepScale() if settings.sigma_rule == "success" and movable else None
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
    breed: Propagator = Compose(steps)
    if scale is not None:
        breed = SuccessRule(breed, scale, settings.sigma_factor, population_size, len(movable))
    return Conditional(population_size, breed, InitUniform(space))


def _pool(selection: str, population_size: int, tournament_size: int) -> Propagator:
    if selection == "best":
        return SelectBest(population_size)
    if selection == "uniform":
        return SelectUniform(population_size)
    return SelectTournament(population_size, tournament_size)


def island_propagator(space: Space, island: int, island_workers: int,
                      settings: EvolutionConfig) -> Propagator:
    """The propagator of a worker on ``island``: the island's strategy (``evolution.strategy``
    or its entry in ``evolution.island_strategies``): the GA, CMA-ES, or both (hybrid). The
    GA's population is ``population_size`` or 2 x the island's workers; CMA-ES keeps its own
    default."""
    strategy = settings.strategy_of(island)
    ga_population = settings.population_size or 2 * island_workers
    if strategy == "ga":
        return default_propagator(space, ga_population, settings)
    from atoll.evolution.cma import CMAES  # imports cmaes only where an island runs it

    if strategy == "cmaes":
        return CMAES(space)
    from atoll.evolution.hybrid import Hybrid

    return Hybrid(CMAES(space), default_propagator(space, ga_population, settings))
