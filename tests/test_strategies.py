"""CMA-ES islands (atoll.evolution.cma) and mixed-strategy islands: statistics in one process,
then real mpirun searches with real HDF5 records."""

from __future__ import annotations

import math
import random

import h5py
import numpy as np
import pytest

from atoll.config import EvolutionConfig, PruningConfig
from atoll.engine.population import Population
from atoll.evolution import cma
from atoll.evolution.cma import CMAES
from atoll.evolution.default import island_strategy
from atoll.evolution.hybrid import Hybrid
from atoll.evolution.lean_margin import LeanCMAwM
from atoll.evolution.unit_view import UnitView
from atoll.individual import NO_PARENT, Individual, Origin, Status
from atoll.record import open_run
from atoll.space import CategoricalParam, FloatParam, IntParam, OrdinalParam, Space
from conftest import mpirun_atoll

MIXED = Space((FloatParam("lr", 1e-4, 1.0, log=True), FloatParam("x", -2.0, 3.0),
               IntParam("n", 1, 7), IntParam("width", 8, 512, log=True),
               OrdinalParam("batch", (16, 32, 64)), CategoricalParam("act", ("relu", "tanh"))))


def sphere(params: dict) -> float:
    return sum(float(v) ** 2 for v in params.values())


def drive(strategy: CMAES, loss, evaluations: int, seed: int = 0) -> Population:
    """A one-process island: ask, evaluate, learn, as the island loop does."""
    rng, population = random.Random(seed), Population()
    for n in range(evaluations):
        child = strategy.ask(population.ranked, rng, n)
        child.loss = loss(child.params)
        population.learn(child)
        strategy.tell(child)
    return population


def test_candidates_respect_bounds_and_types():
    population = drive(CMAES(MIXED), lambda p: (math.log10(p["lr"]) + 2) ** 2 + p["x"] ** 2
                       + (p["act"] == "tanh"), 300)
    for ind in population.ranked:
        p = ind.params
        assert list(p) == list(MIXED.names)
        assert isinstance(p["lr"], float) and 1e-4 <= p["lr"] <= 1.0
        assert isinstance(p["x"], float) and -2.0 <= p["x"] <= 3.0
        assert type(p["n"]) is int and 1 <= p["n"] <= 7
        assert type(p["width"]) is int and 8 <= p["width"] <= 512
        assert p["batch"] in (16, 32, 64) and p["act"] in ("relu", "tanh")
        assert ind.origin == Origin.CMAES and ind.parents == (NO_PARENT, NO_PARENT)
    best = population.ranked[0].params
    assert best["act"] == "relu" and abs(math.log10(best["lr"]) + 2) < 0.5


def test_converges_on_a_quadratic_and_beats_random_search():
    space = Space(tuple(FloatParam(f"x{i}", -5.0, 5.0) for i in range(10)))
    cma = drive(CMAES(space), sphere, 1500).ranked[0].loss
    rng = random.Random(0)
    random_best = min(sphere(space.sample(rng)) for _ in range(1500))
    assert cma < 1e-4 < random_best


def test_one_parameter_works():
    space = Space((FloatParam("x", -3.0, 3.0),))
    assert drive(CMAES(space), lambda p: (p["x"] - 1.0) ** 2, 200).ranked[0].loss < 1e-6


def test_the_same_seed_gives_the_same_candidates():
    space = Space(tuple(FloatParam(f"x{i}", -1.0, 1.0) for i in range(4)))
    runs = [[i.params for i in drive(CMAES(space), sphere, 60, seed=7).ranked] for _ in "ab"]
    assert runs[0] == runs[1]


def test_an_immigrant_pulls_the_mean_towards_itself():
    """The same own results plus one more: a far immigrant bred by a GA with the best loss moves
    the mean towards it; the same slot filled by a mediocre point at the centre does not."""
    space = Space(tuple(FloatParam(f"x{i}", 0.0, 1.0) for i in range(3)))
    corner = {f"x{i}": 0.95 for i in range(3)}
    means = []
    for extra in (corner, {f"x{i}": 0.5 for i in range(3)}):
        strategy, rng = CMAES(space), random.Random(1)
        strategy.ask([], rng, -1)  # the distribution starts at the centre
        size = strategy._cma.population_size
        known = [own(i, {f"x{j}": 0.5 + 0.05 * math.sin(i + j) for j in range(3)},
                     1.0 + 0.01 * i) for i in range(size - 1)]
        known.append(Individual(id=size, params=extra, loss=0.0 if extra is corner else 5.0,
                                island=1, origin=Origin.GA, parents=(3, 4)))
        tell_and_ask(strategy, known, rng)
        means.append(strategy.mean)
    to_corner = [float(np.linalg.norm(m - 0.95)) for m in means]
    assert to_corner[0] < to_corner[1] - 0.05


def test_partial_results_move_the_distribution_only_when_learned():
    """Under successive halving most evaluations end at a rung: with ``partial`` CMA-ES learns
    them (pruned or paused, at their loss there) and walks to the optimum from them alone;
    without it they are no results and the distribution stays where it started."""
    space = Space(tuple(FloatParam(f"x{i}", 0.0, 1.0) for i in range(3)))
    ends = []
    for partial in (True, False):
        strategy, rng = CMAES(space, partial=partial), random.Random(3)
        for n in range(240):
            child = strategy.ask([], rng, n)
            child.loss = sum((v - 0.9) ** 2 for v in child.params.values())
            child.status = Status.PAUSED if n % 2 else Status.PRUNED
            strategy.tell(child)
        ends.append(float(np.linalg.norm(strategy.mean - 0.9)))
    assert ends[0] < 0.05 and ends[1] == pytest.approx(float(np.linalg.norm([0.4] * 3)))


def test_a_failed_result_is_never_learned_even_as_a_partial_one():
    space = Space(tuple(FloatParam(f"x{i}", 0.0, 1.0) for i in range(3)))
    strategy, rng = CMAES(space, partial=True), random.Random(0)
    for n in range(60):
        child = strategy.ask([], rng, n)
        child.status, child.loss = Status.FAILED, 0.0
        strategy.tell(child)
    assert np.array_equal(strategy.mean, np.full(3, 0.5))


def test_only_the_rung_rules_make_cmaes_learn_partial_results():
    rungs = {rule: PruningConfig(rule=rule).rungs for rule in ("none", "median", "halving",
                                                               "asha")}
    assert rungs == {"none": False, "median": False, "halving": True, "asha": True}
    settings = EvolutionConfig(strategy="hybrid")
    hybrid = island_strategy(Space((FloatParam("x", 0.0, 1.0),)), 0, 2, settings, partial=True)
    assert isinstance(hybrid, Hybrid) and hybrid.cmaes.partial


def own(ind_id: int, params: dict, loss: float) -> Individual:
    """A result CMA-ES sampled."""
    return Individual(id=ind_id, params=params, loss=loss, origin=Origin.CMAES)


def tell_and_ask(strategy: CMAES, known: list[Individual], rng: random.Random) -> Individual:
    for ind in known:
        strategy.tell(ind)
    return strategy.ask(known, rng, -1)


@pytest.mark.parametrize("param", [lambda i: FloatParam(f"x{i}", 0.0, 1.0),
                                   lambda i: IntParam(f"k{i}", 0, 9)], ids=["floats", "ints"])
def test_an_injected_step_is_clipped_to_the_mahalanobis_limit(param):
    """Floats run on LeanCMA, linear ints on LeanCMAwM (CMA-ES with margin): both clip alike."""
    strategy = CMAES(Space(tuple(param(i) for i in range(4))))
    strategy.ask([], random.Random(0), -1)
    inner = strategy._cma
    limit = 2.0 + 8.0 / 6.0  # sqrt(4) + 2 * 4 / (4 + 2)
    near = inner.mean + 0.1 * cma.INITIAL_SIGMA
    assert np.array_equal(cma.clip_step(inner, near), near)
    far = np.array([0.99, 0.5, 0.5, 0.01])
    clipped = cma.clip_step(inner, far)
    step = (clipped - inner.mean) / cma.INITIAL_SIGMA  # the covariance starts as the identity
    assert np.linalg.norm(step) == pytest.approx(limit)
    direction = (far - inner.mean) / np.linalg.norm(far - inner.mean)
    assert np.allclose(step / np.linalg.norm(step), direction)


def test_results_cmaes_did_not_sample_are_learned_with_clipped_steps():
    """A population of far points with good losses: bred by a GA, they move the mean at most
    the clipping limit (times the step size); as CMA-ES's own, the whole way."""
    space = Space(tuple(FloatParam(f"x{i}", 0.0, 1.0) for i in range(3)))
    shifts = []
    for origin in (Origin.GA, Origin.CMAES):
        strategy, rng = CMAES(space), random.Random(2)
        strategy.ask([], rng, -1)
        size = strategy._cma.population_size
        known = [Individual(id=i, params={f"x{j}": 0.98 - 0.01 * ((i + j) % 3) for j in range(3)},
                            loss=1.0 + i, origin=origin)
                 for i in range(size)]
        tell_and_ask(strategy, known, rng)
        assert strategy._cma.generation == 1
        shifts.append(float(np.linalg.norm(strategy.mean - 0.5)))
    limit = math.sqrt(3) + 6 / 5
    assert shifts[0] <= limit * cma.INITIAL_SIGMA + 1e-9 < shifts[1]


def test_margin_keeps_integers_moving_after_the_floats_converged(monkeypatch):
    """Binary parameters beside floats that dominate the loss: once the floats converge, the
    step is far below one integer value. Rounding freezes the integers wherever the mean lies;
    CMA-ES with margin keeps a chance of flipping each one, and finds lower losses."""
    space = Space(tuple(IntParam(f"k{i}", 0, 1) for i in range(8))
                  + tuple(FloatParam(f"x{i}", -1.0, 1.0) for i in range(4)))

    def loss(p: dict) -> float:
        return (1000 * sum(p[f"x{i}"] ** 2 for i in range(4))
                + sum(p[f"k{i}"] * (1 + 0.1 * i) for i in range(8)))

    def median_best() -> float:
        return float(np.median([drive(CMAES(space), loss, 800, seed).ranked[0].loss
                                for seed in range(10)]))

    margin = median_best()
    monkeypatch.setattr(cma, "lattice_size", lambda param: 0)  # every parameter rounded
    rounding = median_best()
    assert margin < rounding / 2


def test_the_unit_view_gives_each_parameters_own_conversions():
    """CMA-ES's shortcuts for linear floats and ints give exactly FloatParam's and IntParam's
    values, at and past the bounds, for NaN and for integer bounds; other parameters go through
    their own methods."""
    params = MIXED.params + (FloatParam("i", -3, 7), FloatParam("z", 2.5, 2.5),
                             FloatParam("huge", -1e308, 1e308), IntParam("one", 4, 4),
                             IntParam("wide", -2 ** 60, 2 ** 60))
    view = UnitView(params)
    rng = random.Random(3)
    units = [0.0, 1.0, -0.0, -0.5, 1.5, math.nan, math.inf, -math.inf, 1e-300, 1 - 1e-16]
    for unit in units + [rng.random() for _ in range(200)]:
        point = [unit] * len(params)
        values = view.from_unit(point)
        expected = {p.name: p.from_unit(unit) for p in params}
        assert values == expected
        assert all(type(values[p.name]) is type(expected[p.name]) for p in params)
        assert np.array_equal(view.to_unit(values),
                              [p.to_unit(expected[p.name]) for p in params])
    for changed in ({"x": 7.0, "i": -4, "n": 9}, {"n": -3}, {"n": 2.6}, {"n": np.int64(5)},
                    {"n": math.nan}, {"n": True}):
        outside = {p.name: p.from_unit(0.5) for p in params} | changed
        assert np.array_equal(view.to_unit(outside),
                              [p.to_unit(outside[p.name]) for p in params])


def test_linear_ints_and_ordinals_are_lattices_log_ints_and_floats_are_not():
    assert cma.lattice_size(IntParam("n", 1, 7)) == 7
    assert cma.lattice_size(OrdinalParam("batch", (16, 32, 64))) == 3
    assert cma.lattice_size(IntParam("width", 8, 512, log=True)) == 0
    assert cma.lattice_size(FloatParam("x", 0.0, 1.0)) == 0
    strategy = CMAES(MIXED)
    strategy.ask([], random.Random(0), -1)
    assert isinstance(strategy._cma, LeanCMAwM)
    floats = CMAES(Space((FloatParam("a", 0.0, 1.0), FloatParam("b", 0.0, 1.0))))
    floats.ask([], random.Random(0), -1)
    assert not isinstance(floats._cma, LeanCMAwM)


def test_ipop_restarts_with_a_larger_population_when_it_stalls():
    space = Space(tuple(FloatParam(f"x{i}", -1.0, 1.0) for i in range(2)))
    strategy = CMAES(space)
    assert strategy.generation == 6  # before its first ask: 4 + 3 ln 2, rounded down
    drive(strategy, lambda p: 1.0, 400)  # a flat function: every spread collapses at once
    assert strategy.restarts >= 1
    assert strategy.generation == strategy._cma.population_size >= 2 * 6


# -- real searches ------------------------------------------------------------------------------

def test_mixed_islands_run_migrate_and_end_by_themselves(tmp_path):
    run_dir = tmp_path / "mixed"
    done = mpirun_atoll(4, "search", "--config", "examples/sphere.toml", "--run-dir",
                        str(run_dir), "--set", "search.islands=2", "--set",
                        "search.generations=40", "--set", "migration.probability=0.3",
                        "--set", 'evolution.island_strategies=["ga", "cmaes"]', "-q")
    assert done.returncode == 0, done.stderr[-3000:]
    run = open_run(run_dir)
    ind = run.individuals
    assert len(ind) == 160
    # Workers 0, 1 breed for island 0 (the GA, from parents), 2, 3 for island 1 (CMA-ES).
    ga, cma = ind[ind["origin"] == int(Origin.GA)], ind[ind["origin"] == int(Origin.CMAES)]
    assert len(ga) and (ga["worker"] < 2).all() and (ga["parent_a"] != NO_PARENT).all()
    assert len(cma) == 80 and (cma["worker"] >= 2).all() and (cma["parent_a"] == NO_PARENT).all()
    assert len(run.migrations) > 0
    assert set(run.migrations["to_island"].tolist()) == {0, 1}


def test_a_cmaes_run_resumes_to_its_budget(tmp_path):
    run_dir = tmp_path / "cma"
    first = mpirun_atoll(2, "search", "--config", "examples/sphere.toml", "--run-dir",
                         str(run_dir), "--set", "search.islands=1", "--set",
                         "evolution.strategy=cmaes", "--set", "search.evaluations=60", "-q")
    assert first.returncode == 0, first.stderr[-3000:]
    again = mpirun_atoll(2, "resume", str(run_dir), "--set", "search.evaluations=150", "-q")
    assert again.returncode == 0, again.stderr[-3000:]
    run = open_run(run_dir)
    ind = run.individuals
    assert len(ind) == 150 and len(np.unique(ind["id"])) == 150
    with h5py.File(run_dir / "run.h5", "r") as f:
        assert '"strategy":"cmaes"' in f.attrs["config_json"].decode()
    # The resumed job's CMA-ES learned the first job's results: it searches near them.
    resumed = ind["born"] >= run.jobs["start"][1]  # (ids may pass 60: shares change hands)
    first_best = np.sort(ind["loss"][~resumed])[0]
    assert np.sort(ind["loss"][resumed])[0] <= first_best
