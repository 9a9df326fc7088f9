"""The GA's step size under the 1/5th success rule (atoll.evolution.step_size): it shrinks when
children fail, grows when they succeed, stays in its bounds, scales the Gaussian step, and makes
the GA refine where the fixed step cannot. One process, fixed seeds."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from atoll.config import EvolutionConfig
from atoll.engine.population import Population
from atoll.evolution import GA, IntervalMutationNormal, ga_strategy
from atoll.evolution.step_size import MAX_STEP, SuccessRule
from atoll.individual import Individual
from atoll.space import CategoricalParam, FloatParam, Space

SPACE = Space(tuple(FloatParam(f"x{i}", -5.0, 5.0) for i in range(10)))


def rule_of(strategy: GA) -> SuccessRule:
    """The success rule of the GA strategy."""
    assert isinstance(strategy.rule, SuccessRule)
    return strategy.rule


def drive(strategy: GA, loss, evaluations: int, seed: int = 0) -> Population:
    """A one-process worker: ask, evaluate, learn and tell, as the island loop does."""
    rng, population = random.Random(seed), Population()
    for n in range(evaluations):
        child = strategy.ask(population.ranked, rng, n)
        child.loss = loss(child.params, n)
        population.learn(child)
        strategy.tell(child)
    return population


def sphere(params: dict, n: int = 0) -> float:
    return sum(v * v for v in params.values())


def test_the_step_shrinks_when_children_fail_and_grows_when_they_succeed():
    settings = EvolutionConfig(sigma_rule="success", random_init=0.0)
    failing = ga_strategy(SPACE, 8, settings)
    drive(failing, lambda p, n: float(n), 300)  # every child is worse than all before it
    succeeding = ga_strategy(SPACE, 8, settings)
    drive(succeeding, lambda p, n: -float(n), 300)  # every child is better than all before
    assert rule_of(failing).scale.value < 0.05
    assert rule_of(succeeding).scale.value == pytest.approx(MAX_STEP / settings.sigma_factor)


def test_a_fifth_of_successes_keeps_the_step():
    """At the target rate the factors cancel: one success and four failures, repeated."""
    settings = EvolutionConfig(sigma_rule="success", random_init=0.0, crossover=0.0,
                               mutation=0.0)
    propagator = ga_strategy(SPACE, 8, settings)
    drive(propagator, lambda p, n: -float(n) if n % 5 == 0 else 1e9 + n, 400)
    assert rule_of(propagator).scale.value == pytest.approx(1.0, rel=0.3)


def test_failed_evaluations_and_random_children_are_not_judged():
    settings = EvolutionConfig(sigma_rule="success", random_init=1.0)
    propagator = ga_strategy(SPACE, 8, settings)
    drive(propagator, lambda p, n: float(n), 200)  # every child comes from the random init
    assert rule_of(propagator).scale.value == 1.0
    propagator = ga_strategy(SPACE, 8, EvolutionConfig(sigma_rule="success"))
    drive(propagator, lambda p, n: float(n) if n < 8 else math.nan, 200)
    assert rule_of(propagator).scale.value == 1.0


def test_the_gaussian_step_is_sigma_factor_times_the_scale():
    space = Space((FloatParam("x", 10.0, 20.0),))
    propagator = ga_strategy(space, 2, EvolutionConfig(sigma_rule="success"))
    mutation = next(s for s in propagator.breed.if_full.operators
                    if isinstance(s, IntervalMutationNormal))
    mutation.scale.value = 0.2
    rng, parent = random.Random(3), Individual(id=0, params={"x": 15.0})
    steps = [mutation([parent], rng)[0].params["x"] - 15.0 for _ in range(4000)]
    assert statistics.stdev(steps) == pytest.approx(10.0 * 0.05 * 0.2, rel=0.06)


def test_the_rule_is_the_default_fixed_turns_it_off_and_a_space_without_steps_has_none():
    assert isinstance(ga_strategy(SPACE, 8).rule, SuccessRule)
    assert ga_strategy(SPACE, 8, EvolutionConfig(sigma_rule="fixed")).rule is None
    categorical = Space((CategoricalParam("c", ("a", "b", "c")),))
    assert ga_strategy(categorical, 4).rule is None


def test_the_success_rule_refines_where_the_fixed_step_cannot():
    """10-d sphere, 2000 evaluations, 5 seeds: the fixed step (5% of the range) stalls at its
    own scale; the adapted one keeps shrinking with the distance to the optimum."""
    best = {rule: statistics.median(
        drive(ga_strategy(SPACE, 8, EvolutionConfig(sigma_rule=rule)), sphere, 2000,
              seed).ranked[0].loss for seed in range(5)) for rule in ("fixed", "success")}
    assert best["success"] < best["fixed"] / 4
