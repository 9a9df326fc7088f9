"""Propagators: bounds, types, probabilities, lineage, arity, purity, and that they optimise.

Statistical checks use fixed seeds and bounds of a few standard deviations: loose enough to be
stable, tight enough that a wrong operator (wrong probability, wrong scale, a biased choice) fails.
"""

from __future__ import annotations

import copy
import math
import random
import statistics

import pytest

from atoll.config import EvolutionConfig
from atoll.evolution import (
    ANY,
    Compose,
    Conditional,
    CrossoverUniform,
    InitUniform,
    IntervalMutationNormal,
    PointMutation,
    SelectBest,
    SelectTournament,
    SelectUniform,
    default_propagator,
)
from atoll.individual import NO_PARENT, Individual, Origin
from atoll.space import CategoricalParam, FloatParam, IntParam, OrdinalParam, Space

MIXED = Space((
    FloatParam("lin", -2.0, 3.0),
    FloatParam("lr", 1e-6, 1.0, log=True),
    IntParam("layers", 1, 4),
    CategoricalParam("act", ("relu", "tanh", "gelu")),
    OrdinalParam("batch", (16, 32, 64, 128)),
))


def rng(seed: int = 0) -> random.Random:
    return random.Random(seed)


def population(space: Space, n: int, seed: int = 0) -> list[Individual]:
    """``n`` evaluated individuals with ids 0..n-1, sorted by loss, best first."""
    g = rng(seed)
    inds = [Individual(id=i, params=space.sample(g), loss=float(g.random())) for i in range(n)]
    inds.sort(key=lambda ind: ind.loss)
    return inds


def space_ok(ind: Individual) -> bool:
    return MIXED.contains(ind.params)


def within(fraction: float, p: float, n: int, sigmas: float = 4.0) -> bool:
    return abs(fraction - p) <= sigmas * math.sqrt(p * (1 - p) / n) + 1e-12


def assert_typed(space: Space, params: dict) -> None:
    assert space.contains(params), params
    for p in space.params:
        v = params[p.name]
        if isinstance(p, FloatParam):
            assert type(v) is float
        elif isinstance(p, IntParam):
            assert type(v) is int


def changed(a: dict, b: dict) -> set[str]:
    return {k for k in a if a[k] != b[k]}


# --- mutations: bounds, types, reachability --------------------------------------------------


@pytest.mark.parametrize("op", [
    PointMutation(MIXED, probability=1.0, points=2),
    IntervalMutationNormal(MIXED, sigma_factor=0.3, probability=1.0, points=3),
])
def test_mutations_stay_in_bounds_with_right_types_and_reach_every_value(op):
    g = rng(1)
    parent = population(MIXED, 1)[0]
    seen: dict[str, set] = {p.name: set() for p in MIXED.params}
    lo_hi = {"lin": [math.inf, -math.inf], "lr": [math.inf, -math.inf]}
    for _ in range(3000):
        (child,) = op([parent], g)
        assert_typed(MIXED, child.params)
        for name in seen:
            seen[name].add(child.params[name])
        for name, bounds in lo_hi.items():
            bounds[0] = min(bounds[0], child.params[name])
            bounds[1] = max(bounds[1], child.params[name])
        parent = child  # a random walk visits the whole space, bounds included
    assert seen["layers"] == {1, 2, 3, 4}
    assert seen["batch"] == {16, 32, 64, 128}
    if isinstance(op, PointMutation):
        assert seen["act"] == {"relu", "tanh", "gelu"}
    assert lo_hi["lin"][0] < -1.5 and lo_hi["lin"][1] > 2.5
    assert lo_hi["lr"][0] < 1e-5 and lo_hi["lr"][1] > 0.1


def test_point_mutation_changes_exactly_points_params():
    g = rng(2)
    parent = population(MIXED, 1)[0]
    space_no_int = Space(tuple(p for p in MIXED.params if p.name != "layers"))
    parent_no_int = Individual(id=0, params={k: v for k, v in parent.params.items()
                                             if k != "layers"})
    for points in (1, 2, 3):
        op = PointMutation(MIXED, probability=1.0, points=points)
        for _ in range(300):
            assert len(changed(parent.params, op([parent], g)[0].params)) == points
        op = PointMutation(space_no_int, probability=1.0, points=points)
        for _ in range(300):
            assert len(changed(parent_no_int.params, op([parent_no_int], g)[0].params)) == points


def test_point_mutation_resamples_categoricals_to_another_choice_or_keeps_a_single_one():
    space = Space((CategoricalParam("c", ("a", "b", "c")), CategoricalParam("one", ("x",))))
    op = PointMutation(space, probability=1.0, points=2)
    g = rng(3)
    counts = {"b": 0, "c": 0}
    for _ in range(2000):
        (child,) = op([Individual(id=0, params={"c": "a", "one": "x"})], g)
        assert child.params["c"] != "a" and child.params["one"] == "x"
        counts[child.params["c"]] += 1
    assert within(counts["b"] / 2000, 0.5, 2000)


@pytest.mark.parametrize("cls", [PointMutation, IntervalMutationNormal])
@pytest.mark.parametrize("p", [0.0, 0.1, 0.4, 1.0])
def test_mutation_probability_is_honoured(cls, p):
    space = Space((FloatParam("x", 0.0, 1.0), FloatParam("y", 0.0, 1.0)))
    op = cls(space, probability=p) if cls is PointMutation else cls(space, 0.1, probability=p)
    parent = Individual(id=3, params={"x": 0.5, "y": 0.5})
    g = rng(4)
    n = 4000
    mutated = sum(bool(changed(parent.params, op([parent], g)[0].params)) for _ in range(n))
    assert within(mutated / n, p, n)


def test_interval_mutation_never_touches_categoricals():
    space = Space((CategoricalParam("c", ("a", "b")), FloatParam("x", 0.0, 1.0)))
    op = IntervalMutationNormal(space, sigma_factor=0.5, probability=1.0)
    g = rng(5)
    for _ in range(2000):
        (child,) = op([Individual(id=0, params={"c": "b", "x": 0.5})], g)
        assert child.params["c"] == "b"
    with pytest.raises(ValueError, match="points=1"):
        IntervalMutationNormal(Space((CategoricalParam("c", ("a", "b")),)), 0.1, 1.0)


def test_interval_mutation_step_scales_with_sigma_factor():
    space = Space((FloatParam("x", 10.0, 20.0),))
    parent = Individual(id=0, params={"x": 15.0})
    stds = []
    for sigma in (0.01, 0.04):
        op = IntervalMutationNormal(space, sigma_factor=sigma, probability=1.0)
        g = rng(6)
        steps = [op([parent], g)[0].params["x"] - 15.0 for _ in range(4000)]
        assert abs(statistics.mean(steps)) < 4 * 10 * sigma / math.sqrt(4000)
        stds.append(statistics.stdev(steps))
        assert stds[-1] == pytest.approx(10.0 * sigma, rel=0.06)  # sigma is a fraction of width
    assert stds[1] / stds[0] == pytest.approx(4.0, rel=0.08)


def test_log_float_mutates_multiplicatively():
    space = Space((FloatParam("lr", 1e-6, 1.0, log=True),))
    op = IntervalMutationNormal(space, sigma_factor=0.02, probability=1.0)
    expected = 0.02 * math.log(1e6)  # std of log(new / old)
    abs_steps = []
    for start in (1e-4, 1e-2):
        g = rng(7)
        parent = Individual(id=0, params={"lr": start})
        news = [op([parent], g)[0].params["lr"] for _ in range(3000)]
        log_ratios = [math.log(v / start) for v in news]
        assert statistics.stdev(log_ratios) == pytest.approx(expected, rel=0.06)
        abs_steps.append(statistics.median(abs(v - start) for v in news))
    assert abs_steps[1] / abs_steps[0] == pytest.approx(100.0, rel=0.15)


def test_interval_mutation_moves_ordinals_and_ints_to_neighbours():
    space = Space((OrdinalParam("o", tuple(range(10))), IntParam("i", 0, 9)))
    op = IntervalMutationNormal(space, sigma_factor=0.1, probability=1.0, points=2)
    g = rng(8)
    jumps = []
    for _ in range(2000):
        (child,) = op([Individual(id=0, params={"o": 5, "i": 5})], g)
        assert_typed(space, child.params)
        jumps += [abs(child.params["o"] - 5), abs(child.params["i"] - 5)]
    assert 0.2 < sum(j > 0 for j in jumps) / len(jumps) < 0.8
    assert max(jumps) <= 5 and statistics.mean(jumps) < 1.5


# --- lineage -----------------------------------------------------------------------------------


@pytest.mark.parametrize("op", [
    PointMutation(MIXED, probability=1.0),
    PointMutation(MIXED, probability=0.0),
    IntervalMutationNormal(MIXED, 0.05, probability=1.0),
])
def test_mutation_lineage(op):
    g = rng(9)
    parent = population(MIXED, 8)[3]
    (child,) = op([parent], g)
    assert child is not parent and child.params is not parent.params
    assert (child.id, child.origin, child.parents) == (-1, Origin.GA, (parent.id, NO_PARENT))
    bred = Individual(id=-1, params=dict(parent.params), origin=Origin.GA, parents=(4, 7))
    (again,) = op([bred], g)
    assert again is not bred
    assert (again.id, again.origin, again.parents) == (-1, Origin.GA, (4, 7))
    fresh = Individual(id=-1, params=dict(parent.params), origin=Origin.RANDOM)
    assert op([fresh], g)[0].origin == Origin.RANDOM


# --- crossover ---------------------------------------------------------------------------------


def test_crossover_takes_about_half_from_each_parent():
    space = Space(tuple(FloatParam(f"x{i}", 0.0, 1.0) for i in range(10)))
    a = Individual(id=1, params={f"x{i}": 0.0 for i in range(10)})
    b = Individual(id=2, params={f"x{i}": 1.0 for i in range(10)})
    op = CrossoverUniform(1.0)
    g = rng(10)
    from_b = [0] * 10
    n = 2000
    for _ in range(n):
        (child,) = op([a, b], g)
        assert space.contains(child.params)
        assert (child.id, child.origin, child.parents) == (-1, Origin.GA, (1, 2))
        for i in range(10):
            from_b[i] += child.params[f"x{i}"] == 1.0
    assert within(sum(from_b) / (10 * n), 0.5, 10 * n)
    assert all(within(c / n, 0.5, n) for c in from_b)  # every gene, not just on average


def test_crossover_copies_first_parent_when_not_applied():
    parents = population(MIXED, 2)
    g = rng(11)
    for _ in range(200):
        (child,) = CrossoverUniform(0.0)(parents, g)
        assert child.params == parents[0].params and child.params is not parents[0].params
        assert child.parents == (parents[0].id, parents[1].id)
    n = 4000
    op = CrossoverUniform(0.7)
    a = Individual(id=1, params={f"x{i}": 0.0 for i in range(20)})
    b = Individual(id=2, params={f"x{i}": 1.0 for i in range(20)})
    mixed = sum(any(v == 1.0 for v in op([a, b], g)[0].params.values()) for _ in range(n))
    assert within(mixed / n, 0.7, n)


# --- selections --------------------------------------------------------------------------------


def test_select_best_returns_the_first_k_without_sorting():
    pop = population(MIXED, 6)
    assert SelectBest(3)(pop, rng()) == pop[:3] and all(
        x is y for x, y in zip(SelectBest(3)(pop, rng()), pop[:3], strict=True))
    assert SelectBest(10)(pop, rng()) == pop
    shuffled = pop[::-1]
    assert SelectBest(2)(shuffled, rng()) == shuffled[:2]  # contract: input arrives sorted


def test_select_uniform_is_distinct_and_uniform():
    pop = population(MIXED, 10)
    op = SelectUniform(3)
    g = rng(12)
    counts = dict.fromkeys(range(10), 0)
    n = 3000
    for _ in range(n):
        picked = op(pop, g)
        assert len({id(x) for x in picked}) == 3 and all(any(x is y for y in pop) for x in picked)
        for x in picked:
            counts[x.id] += 1
    expected = 3 * n / 10
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 27.9  # 9 degrees of freedom, p = 0.001
    assert sorted(x.id for x in SelectUniform(5)(pop[:3], g)) == sorted(x.id for x in pop[:3])
    assert SelectUniform(2)([], g) == []


def test_tournament_prefers_better_individuals():
    pop = population(MIXED, 10)
    g = rng(13)
    wins = [0] * 10
    n = 3000
    for winner in SelectTournament(n, size=3)(pop, g):
        wins[pop.index(winner)] += 1
    # Rank r (0 = best) wins when it is drawn and no better one is: C(9-r, 2) / C(10, 3).
    for r in range(10):
        p = math.comb(9 - r, 2) / math.comb(10, 3)
        assert within(wins[r] / n, p, n) if p else wins[r] == 0
    assert SelectTournament(4, size=1)(pop[:1], g) == [pop[0]] * 4
    failed = Individual(id=99, params=pop[0].params)  # NaN loss ranks last
    assert SelectTournament(1, size=2)([failed, pop[-1]], g) == [pop[-1]]


# --- composition -------------------------------------------------------------------------------


def test_compose_checks_arity_at_construction():
    with pytest.raises(ValueError, match="at least one"):
        Compose([])
    with pytest.raises(ValueError, match="yields 3 individual.*takes 2"):
        Compose([SelectUniform(3), CrossoverUniform(0.5)])
    with pytest.raises(ValueError, match="yields 1 individual.*takes 2"):
        Compose([CrossoverUniform(0.5), CrossoverUniform(0.5)])
    with pytest.raises(ValueError, match="takes 1"):
        Compose([SelectBest(4), InitUniform(MIXED, 0.5)])
    ok = Compose([SelectBest(4), SelectUniform(2), CrossoverUniform(0.5),
                  PointMutation(MIXED, 0.5), InitUniform(MIXED, 0.5)])
    assert (ok.parents, ok.offspring) == (ANY, 1)
    assert (Compose([PointMutation(MIXED, 1.0)]).parents, Compose([SelectBest(2)]).offspring) \
        == (1, 2)
    any_to_any = Compose([Compose([SelectBest(3)]), SelectUniform(2)])
    assert any_to_any.offspring == 2


def test_init_uniform_arity_follows_probability():
    assert InitUniform(MIXED).parents == ANY and InitUniform(MIXED, 0.1).parents == 1
    g = rng(14)
    for inputs in ([], population(MIXED, 5)):
        (fresh,) = InitUniform(MIXED)(inputs, g)
        assert space_ok(fresh) and (fresh.id, fresh.origin, fresh.parents) == \
            (-1, Origin.RANDOM, (NO_PARENT, NO_PARENT))
    child = Individual(id=-1, params=MIXED.sample(g), origin=Origin.GA, parents=(1, 2))
    assert InitUniform(MIXED, 0.0)([child], g) == [child]
    n = 4000
    replaced = sum(InitUniform(MIXED, 0.1)([child], g)[0] is not child for _ in range(n))
    assert within(replaced / n, 0.1, n)
    with pytest.raises(ValueError, match="takes 1"):
        InitUniform(MIXED, 0.5)([], g)


def test_conditional_switches_at_population_size():
    cond = Conditional(4, SelectBest(1), InitUniform(MIXED))
    assert (cond.parents, cond.offspring) == (ANY, 1)
    pop = population(MIXED, 5)
    g = rng(15)
    assert cond(pop[:3], g)[0].origin == Origin.RANDOM and cond(pop[:3], g)[0].id == -1
    assert cond(pop[:4], g) == [pop[0]] and cond(pop, g) == [pop[0]]
    with pytest.raises(ValueError, match="must match"):
        Conditional(4, SelectBest(2), InitUniform(MIXED))


def test_default_propagator_fills_then_breeds():
    prop = default_propagator(MIXED, 8, EvolutionConfig(random_init=0.0))
    assert (prop.parents, prop.offspring) == (ANY, 1)
    g = rng(16)
    pop = population(MIXED, 12)
    for n in range(8):
        (ind,) = prop(pop[:n], g)
        assert space_ok(ind) and ind.origin == Origin.RANDOM and ind.parents == (-1, -1)
    ids = {ind.id for ind in pop[:8]}  # SelectBest(8): only the 8 best breed
    for _ in range(500):
        (ind,) = prop(pop, g)
        assert_typed(MIXED, ind.params)
        assert ind.origin == Origin.GA and ind.id == -1 and set(ind.parents) <= ids


@pytest.mark.parametrize("selection", ["best", "uniform", "tournament"])
def test_default_propagator_random_init_share_and_selections(selection):
    prop = default_propagator(MIXED, 8, EvolutionConfig(selection=selection))
    pop = population(MIXED, 12)
    g = rng(17)
    n = 3000
    out = [prop(pop, g)[0] for _ in range(n)]
    assert all(space_ok(ind) for ind in out)
    assert within(sum(ind.origin == Origin.RANDOM for ind in out) / n, 0.1, n)
    best8 = {ind.id for ind in pop[:8]}
    parent_ids = {i for ind in out for i in ind.parents if i != NO_PARENT}
    assert (parent_ids <= best8) == (selection == "best")


def test_default_propagator_validates_and_skips_interval_mutation_without_numbers():
    with pytest.raises(ValueError, match="selection"):
        default_propagator(MIXED, 4, EvolutionConfig(selection="roulette"))
    with pytest.raises(ValueError, match="population_size"):
        default_propagator(MIXED, 1)
    cats = Space((CategoricalParam("a", ("x", "y")), CategoricalParam("b", (1, 2, 3))))
    prop = default_propagator(cats, 4)
    g = rng(18)
    pop = population(cats, 6)
    assert all(cats.contains(prop(pop, g)[0].params) for _ in range(200))


# --- purity and reproducibility ----------------------------------------------------------------


OPERATORS = [
    SelectBest(3), SelectUniform(3), SelectTournament(3, 2), CrossoverUniform(1.0),
    PointMutation(MIXED, 1.0, points=2), IntervalMutationNormal(MIXED, 0.2, 1.0, points=3),
    InitUniform(MIXED), InitUniform(MIXED, 0.5), default_propagator(MIXED, 4),
]


@pytest.mark.parametrize("op", OPERATORS, ids=repr)
def test_operators_are_pure_and_reproducible(op):
    n = 2 if op.parents == ANY else op.parents
    pop = population(MIXED, 6 if op.parents == ANY else n)
    before = copy.deepcopy(pop)
    outs = [op(pop, rng(19)) for _ in range(2)]
    assert pop == before  # nothing changed in place, params dicts included
    assert outs[0] == outs[1]  # same seed, same output
    assert len(outs[0]) == (op.offspring if op.offspring != ANY else len(pop))
    assert all(space_ok(ind) for ind in outs[0])


# --- it optimises ------------------------------------------------------------------------------


def sphere(params: dict) -> float:
    return sum(v * v for v in params.values())


def evolve(seed: int, budget: int) -> float:
    space = Space(tuple(FloatParam(f"x{i}", -5.0, 5.0) for i in range(4)))
    prop = default_propagator(space, 8)
    g = rng(seed)
    pop: list[Individual] = []
    for i in range(budget):
        (ind,) = prop(pop, g)
        ind.id, ind.loss = i, sphere(ind.params)
        pop.append(ind)
        pop.sort(key=lambda x: x.loss)  # the island loop's invariant: sorted, best first
    return pop[0].loss


def random_search(seed: int, budget: int) -> float:
    space = Space(tuple(FloatParam(f"x{i}", -5.0, 5.0) for i in range(4)))
    g = rng(seed)
    return min(sphere(space.sample(g)) for _ in range(budget))


def test_breeding_beats_random_search_on_the_sphere():
    seeds = range(5)
    evolved = statistics.median(evolve(s, 300) for s in seeds)
    random = statistics.median(random_search(s + 100, 300) for s in seeds)
    assert evolved < random / 5, (evolved, random)
