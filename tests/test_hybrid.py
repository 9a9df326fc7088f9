"""The hybrid strategy: CMA-ES and the GA on one island's population, picked by recent success."""

from __future__ import annotations

import random
import statistics

import numpy as np
import pytest

from atoll.config import EvolutionConfig
from atoll.engine.population import Population
from atoll.evolution import hybrid
from atoll.evolution.default import island_strategy
from atoll.evolution.hybrid import BY_CMAES, Hybrid
from atoll.individual import NO_PARENT, Individual, Origin
from atoll.record import open_run
from atoll.space import FloatParam, Space
from conftest import mpirun_atoll
from test_strategies import MIXED, sphere


def box(dims: int, low: float, high: float) -> Space:
    return Space(tuple(FloatParam(f"x{i}", low, high) for i in range(dims)))


def schwefel(params: dict) -> float:
    x = np.array(list(params.values()), dtype=float)
    return float(418.9829 * x.size - np.sum(x * np.sin(np.sqrt(np.abs(x)))))


def island(space: Space, strategy: str, workers: int, loss, evaluations: int,
           seed: int) -> float:
    """One process, ``workers`` workers with a strategy each, every candidate evaluated
    while the other workers breed theirs (so each learns a result ``workers - 1`` breeds
    late, as on an island): the best loss."""
    settings = EvolutionConfig(strategy=strategy)
    breeders = [island_strategy(space, 0, workers, settings) for _ in range(workers)]
    rngs = [random.Random(seed * 100 + k) for k in range(workers)]
    population, in_flight = Population(), [None] * workers
    for n in range(evaluations + workers):
        k = n % workers
        if in_flight[k] is not None:
            in_flight[k].loss = loss(in_flight[k].params)
            population.learn(in_flight[k])
            for breeder in breeders:
                breeder.tell(in_flight[k])
        if n < evaluations:
            in_flight[k] = breeders[k].ask(population.ranked, rngs[k], n)
    return min(i.loss for i in population)


def result(ind_id: int, loss: float, origin: Origin) -> Individual:
    parents = (NO_PARENT, NO_PARENT) if origin == Origin.CMAES else (0, 1)
    return Individual(id=ind_id, params={"x0": 0.0, "x1": 0.0}, loss=loss, origin=origin,
                      parents=parents)


def tell_and_ask(breeder: Hybrid, new: list[Individual], rng: random.Random) -> None:
    for ind in new:
        breeder.tell(ind)
    breeder.ask(sorted((i for i in new if i.usable), key=lambda i: i.loss), rng, -1)


def fresh() -> Hybrid:
    breeder = island_strategy(box(2, -1.0, 1.0), 0, 2, EvolutionConfig(strategy="hybrid"))
    assert isinstance(breeder, Hybrid)
    return breeder


def test_results_are_credited_to_the_strategy_that_bred_them():
    """Told the same results, the tries counted follow each result's origin; a random one
    is credited to neither."""
    breeder, rng = fresh(), random.Random(0)
    assert breeder.cmaes_share == 0.5  # nothing known yet
    tell_and_ask(breeder, [result(0, 1.0, Origin.CMAES), result(1, 2.0, Origin.CMAES),
                           result(2, 3.0, Origin.GA),
                           Individual(id=3, params={"x0": 0.0, "x1": 0.0}, loss=0.5)], rng)
    forget = 1.0 - 1.0 / hybrid.WINDOW  # each credited result fades the earlier ones
    assert breeder.tries[BY_CMAES] == pytest.approx((1.0 + forget) * forget)
    assert breeder.tries[1 - BY_CMAES] == pytest.approx(1.0)


def test_the_share_follows_the_strategy_that_finds_new_bests():
    """CMA-ES's results keep improving on the best and the GA's do not: CMA-ES breeds almost
    every candidate, down to the floor left for the GA; then the roles swap and so does the
    share, within a few windows."""
    breeder, rng = fresh(), random.Random(0)
    tell_and_ask(breeder, [result(i, 100.0 - i if i % 2 else 1000.0,
                                  Origin.CMAES if i % 2 else Origin.GA) for i in range(400)], rng)
    assert breeder.cmaes_share == pytest.approx(1.0 - hybrid.FLOOR)
    tell_and_ask(breeder, [result(i, -i if i % 2 else 1000.0, Origin.GA if i % 2 else Origin.CMAES)
                           for i in range(400, 1200)], rng)
    assert breeder.cmaes_share == pytest.approx(hybrid.FLOOR)


def test_a_new_best_earns_by_how_far_it_moves_the_best():
    """The GA finds a new best with each of its results but moves the best by a millionth of
    the island's spread; CMA-ES finds one with every other result and moves it by half the
    spread. Counted as whole successes the GA would lead (1 against 1/2); earning by the gain,
    CMA-ES leads and breeds all but the floor. A GA child that jumps by the whole spread or
    more earns 1, no more."""
    breeder, rng, population = fresh(), random.Random(0), Population()
    for k in range(10):  # a population with a spread of 10 losses from 1000 to 1009
        population.learn(Individual(id=k, params={"x0": 0.0, "x1": 0.0}, loss=1000.0 + k))
    best, ident = 1000.0, 10
    for _ in range(300):
        gap = population.ranked[breeder.cmaes.generation - 1].loss - population.ranked[0].loss
        bred = [(Origin.GA, best - 1e-6 * gap), (Origin.CMAES, best - 0.5 * gap),
                (Origin.GA, best - 0.5 * gap - 2e-6 * gap), (Origin.CMAES, best + gap)]
        for origin, loss in bred:
            ind = result(ident, loss, origin)
            best, ident = min(best, loss), ident + 1
            population.learn(ind)
            breeder.tell(ind)
        breeder.ask(population.ranked, rng, ident)
    assert breeder.cmaes_share == pytest.approx(1.0 - hybrid.FLOOR)
    assert hybrid.gain_credit(3.0, 2.0) == 1.0 and hybrid.gain_credit(0.5, 2.0) == 0.25
    assert hybrid.gain_credit(float("inf"), 2.0) == 1.0  # the island's first result


def test_a_faded_record_waits_before_it_takes_the_lead_again():
    """The GA failed once; since then CMA-ES has found a new best with every tenth result. The
    GA's record fades, but 200 results later its rate, shrunk towards the island's, still reads
    below CMA-ES's: CMA-ES keeps breeding (with PRIOR's 1/2 alone, the GA had taken the lead
    some 90 results after its failure). A GA whose new bests move the best by more than the
    island's spread takes the lead all the same."""
    breeder, rng = fresh(), random.Random(0)
    known = [Individual(id=0, params={"x0": 0.0, "x1": 0.0}, loss=0.0),  # random: the first best
             result(1, 1000.0, Origin.GA)]
    known += [result(i, -i if i % 10 == 0 else 1000.0, Origin.CMAES) for i in range(2, 202)]
    tell_and_ask(breeder, known, rng)
    assert breeder.cmaes_share > 0.9
    tell_and_ask(breeder, [result(i, -100.0 * i, Origin.GA) for i in range(202, 222)], rng)
    assert breeder.cmaes_share < 0.5


def test_both_strategies_breed_and_respect_bounds_and_types():
    breeder, rng, population = island_strategy(MIXED, 0, 1, EvolutionConfig(
        strategy="hybrid")), random.Random(3), Population()
    kinds = []
    for n in range(300):
        child = breeder.ask(population.ranked, rng, n)
        assert list(child.params) == list(MIXED.names) and MIXED.contains(child.params)
        assert type(child.params["n"]) is int and isinstance(child.params["x"], float)
        child.loss = float(child.params["x"]) ** 2 + child.params["n"]
        population.learn(child)
        breeder.tell(child)
        kinds.append(child.origin)
    assert kinds.count(Origin.CMAES) > 0 and kinds.count(Origin.GA) > 0


def test_hybrid_refines_like_cmaes_and_crosses_basins_like_the_ga():
    """Median of 3 seeds, 6 dimensions, 4 workers, 900 evaluations: on sphere the hybrid ends
    orders of magnitude below the GA, on schwefel (deceptive, separable) well below CMA-ES."""
    def median_best(strategy: str, space: Space, loss) -> float:
        return statistics.median(island(space, strategy, 4, loss, 900, seed)
                                 for seed in range(3))

    smooth, rugged = box(6, -5.12, 5.12), box(6, -500.0, 500.0)
    assert median_best("hybrid", smooth, sphere) < median_best("ga", smooth, sphere) / 100
    assert median_best("hybrid", rugged, schwefel) < median_best("cmaes", rugged, schwefel) / 2


def test_hybrid_islands_run_migrate_and_resume_to_their_budget(tmp_path):
    """No strategy set: the default is the hybrid on every island."""
    run_dir = tmp_path / "hybrid"
    first = mpirun_atoll(4, "search", "--config", "examples/sphere.toml", "--run-dir",
                         str(run_dir), "--set", "search.islands=2", "--set",
                         "migration.probability=0.3",
                         "--set", "search.evaluations=80", "-q")
    assert first.returncode == 0, first.stderr[-3000:]
    again = mpirun_atoll(4, "resume", str(run_dir), "--set", "search.evaluations=200", "-q")
    assert again.returncode == 0, again.stderr[-3000:]
    run = open_run(run_dir)
    ind = run.individuals
    assert len(ind) == 200 and len(np.unique(ind["id"])) == 200
    by_cmaes, by_ga = ind["origin"] == int(Origin.CMAES), ind["origin"] == int(Origin.GA)
    assert by_cmaes.any() and by_ga.any()  # both strategies bred
    assert (ind["parent_a"][by_cmaes] == NO_PARENT).all()
    assert len(run.migrations) > 0
    # The resumed job learned the first one's results: it breeds from them and searches where
    # they are good (its best alone may not beat the first job's best: the order is not fixed;
    # its median was 9x and 100x lower in two runs).
    # (by birth, not by id: a worker that took over part of a partner's share gave ids past 80)
    resumed = ind["born"] >= run.jobs["start"][1]
    first = ~resumed
    assert first.sum() == 80
    assert np.isin(ind["parent_a"][resumed], ind["id"][first]).any()
    assert np.median(ind["loss"][resumed]) < np.median(ind["loss"][first]) / 3


def picks(breeder: Hybrid, rng: random.Random, n: int) -> float:
    """The share of ``n`` candidates CMA-ES breeds now (nothing told in between)."""
    ranked = [result(0, 0.0, Origin.CMAES), result(1, 1.0, Origin.GA)]
    return sum(breeder.ask(ranked, rng, -1).origin == Origin.CMAES for _ in range(n)) / n


def test_a_stalled_island_keeps_both_strategies_breeding_after_a_lock_on():
    """CMA-ES found a new best with every other result and holds the share at 1 - FLOOR; then
    the island stalls (no new best from anyone): once the stall is 2 x PATIENCE usual gaps long
    (a gap of at least one CMA-ES generation),
    the GA breeds about STALLED_FLOOR of the candidates although pursuit still locks it out,
    and one new best brings the floor back to FLOOR."""
    breeder, rng = fresh(), random.Random(1)
    tell_and_ask(breeder, [result(i, -i if i % 2 else 1000.0,
                                  Origin.CMAES if i % 2 else Origin.GA) for i in range(400)], rng)
    assert breeder.cmaes_share == pytest.approx(1.0 - hybrid.FLOOR)
    assert picks(breeder, rng, 2000) > 1.0 - 3 * hybrid.FLOOR
    floors = []
    for i in range(400, 1400):
        tell_and_ask(breeder, [result(i, 1000.0, Origin.CMAES)], rng)
        floors.append(breeder.floor())
        if floors[-1] == pytest.approx(hybrid.STALLED_FLOOR):
            break
    assert floors[0] == pytest.approx(hybrid.FLOOR)
    assert floors[-1] == pytest.approx(hybrid.STALLED_FLOOR)
    assert breeder.cmaes_share > 0.9  # the pursuit alone still locks the GA out
    assert picks(breeder, rng, 2000) == pytest.approx(1.0 - hybrid.STALLED_FLOOR, abs=0.04)
    tell_and_ask(breeder, [result(1400, -1000.0, Origin.CMAES)], rng)
    assert breeder.floor() == pytest.approx(hybrid.FLOOR)


def test_a_slow_steady_refinement_is_not_a_stall():
    """CMA-ES finds a new best only every 40th result, but it always has: the floor stays at
    FLOOR through each gap (a fixed count of results would read each gap as a stall)."""
    breeder, rng = fresh(), random.Random(2)
    floors = []
    for i in range(1200):
        tell_and_ask(breeder, [result(i, -i if i % 40 == 0 else 1000.0, Origin.CMAES)], rng)
        floors.append(breeder.floor())
    assert max(floors[400:]) == pytest.approx(hybrid.FLOOR)
