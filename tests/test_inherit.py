"""Inherited weights and PBT: the strategy and its perturbation, the retention of checkpoints,
and real mpirun searches of the digits classifier whose children inherit (a 2-rank DDP worker
with the GA, two 1-rank workers with PBT, then a resume)."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from atoll.config import PbtConfig, load_config
from atoll.engine.population import Population
from atoll.engine.restore import restore_population, to_continue
from atoll.engine.topology import plan_layout
from atoll.errors import ConfigError
from atoll.evolution.inherit import Inheriting, better_parent
from atoll.evolution.pbt import PBT, explore
from atoll.individual import NO_EPOCH, NO_PARENT, Individual, Origin, Status, replaced_member
from atoll.record import RunPaths, open_run, read_history
from atoll.record.checkpoints import CheckpointStore, Retention
from atoll.record.schema import individual_dtype
from atoll.space import Space
from conftest import atoll_cmd, mpirun_atoll, run
from objectives import LINEAGE_DEMO

SPACE = Space.from_dict({
    "lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
    "gamma": {"type": "float", "low": 0.5, "high": 0.999},
    "layers": {"type": "int", "low": 1, "high": 5},
    "act": {"type": "categorical", "choices": ["a", "b", "c"]}})
START = {"lr": 0.01, "gamma": 0.9, "layers": 3, "act": "b"}


def explored(params: dict[str, Any], settings: PbtConfig, fixed: tuple[str, ...] = (),
             draws: int = 300) -> dict[str, set[Any]]:
    seen: dict[str, set[Any]] = {name: set() for name in SPACE.names}
    for seed in range(draws):
        for name, value in explore(params, SPACE, random.Random(seed), settings, fixed).items():
            seen[name].add(round(value, 12) if isinstance(value, float) else value)
    return seen


def test_explore_perturbs_floats_by_its_factors_and_moves_the_others_one_step():
    seen = explored(START, PbtConfig(resample=0.0, perturb=0.2))
    assert seen["lr"] == {0.008, 0.012}
    assert seen["gamma"] == {0.72, 0.999}  # 0.9 x 1.2 is clipped to the bound
    assert seen["layers"] == {2, 4} and seen["act"] == {"a", "c"}
    edge = explored({**START, "layers": 5, "act": "a"}, PbtConfig(resample=0.0))
    assert edge["layers"] == {4} and edge["act"] == {"b"}


def test_explore_resamples_from_the_space_and_never_moves_fixed_parameters():
    seen = explored(START, PbtConfig(resample=1.0), fixed=("layers",))
    assert seen["layers"] == {3}
    assert seen["act"] == {"a", "b", "c"} and len(seen["lr"]) > 100
    assert all(SPACE["lr"].contains(v) for v in seen["lr"])
    some = explored(START, PbtConfig(resample=0.25, perturb=0.2))["lr"]
    assert {0.008, 0.012} < some and len(some) > 10  # both: perturbed, or drawn anew


def result(ident: int, loss: float, worker: int, params: dict[str, Any] | None = None,
           **fields: Any) -> Individual:
    """A result as its island learns it: the worker that evaluated it owns it, unless said."""
    fields.setdefault("owner", worker)
    return Individual(id=ident, params=dict(params or START), worker=worker, loss=loss,
                      **fields)


def test_pbt_starts_members_at_random_until_its_population_is_full():
    pbt = PBT(SPACE, population_size=3, worker=0)
    rng = random.Random(1)
    for n in range(3):
        child = pbt.ask([], rng, n)
        assert child.origin == Origin.RANDOM and child.inherit_from == NO_PARENT
        pbt.tell(result(n, float(n), worker=n % 2, params=child.params))
    assert pbt.ask([], rng, 3).origin == Origin.PBT


def test_pbt_trains_a_good_member_on_and_replaces_a_bad_one_by_a_perturbed_top_copy():
    settings = PbtConfig(fraction=0.25, resample=0.0)
    good, bad = PBT(SPACE, 4, worker=0, settings=settings), PBT(SPACE, 4, worker=1,
                                                                 settings=settings)
    members = [result(0, 0.1, 0), result(1, 0.9, 1), result(2, 0.3, 0),
               result(3, 0.5, 1, params={**START, "lr": 0.5})]
    for strategy in (good, bad):
        for ind in members:
            strategy.tell(ind)
    child = good.ask([], random.Random(0), 10)  # worker 0's oldest member: id 0, the best
    assert child.origin == Origin.PBT and child.params == START
    assert child.parents == (0, NO_PARENT) and child.inherit_from == 0
    copy = bad.ask([], random.Random(0), 11)  # worker 1's oldest: id 1, in the bottom quarter
    assert copy.parents == (0, 1) and copy.inherit_from == 0  # the top quarter is member 0
    assert copy.params != START and copy.params["lr"] in (0.008, 0.012)
    bad.tell(result(11, 0.2, 1, params=copy.params, origin=Origin.PBT, parents=copy.parents))
    assert set(bad.members) == {0, 2, 3, 11}  # the copy took member 1's place
    assert replaced_member(copy) == 1 and replaced_member(child) == 0


def test_after_a_resume_on_other_workers_each_trains_on_the_members_the_restore_gave_it():
    """The members were evaluated by workers 4-7 of the earlier job's layout; the restore gave
    them to workers 0 and 1 (``owner``). Each trains on its own, none is trained on twice at
    once, none is left behind."""
    members = [result(ident, 0.1 * ident, worker=4 + ident % 4, owner=ident % 2)
               for ident in range(4)]
    chosen = []
    for worker in (0, 1):
        pbt = PBT(SPACE, 4, worker=worker, settings=PbtConfig(fraction=0.25))
        for ind in members:
            pbt.tell(ind)
        chosen.append(replaced_member(pbt.ask([], random.Random(0), 10 + worker)))
    assert chosen == [0, 1]  # each one's oldest: 0 and 2 are worker 0's, 1 and 3 worker 1's


def test_a_failed_member_is_replaced_by_a_copy_of_a_top_one():
    pbt = PBT(SPACE, 2, worker=1)
    pbt.tell(result(0, 0.4, 0))
    pbt.tell(result(1, math.nan, 1, status=Status.FAILED))
    child = pbt.ask([], random.Random(3), 5)
    assert child.parents == (0, 1) and child.inherit_from == 0


def test_a_copy_from_another_island_is_no_member_and_shields_no_bad_one():
    """A copy nobody here trains on neither fills the population nor ranks below a member."""
    pbt = PBT(SPACE, 2, worker=1)
    pbt.tell(result(0, 0.1, 0))
    pbt.tell(result(7, 2.4, 5, version=1))  # another island's, worse than anything here
    assert pbt.ask([], random.Random(0), 8).origin == Origin.RANDOM  # one member so far
    pbt.tell(result(1, 2.3, 1))
    assert set(pbt.members) == {0, 1}
    child = pbt.ask([], random.Random(0), 9)  # worker 1's member 1 is the island's worst
    assert child.parents == (0, 1) and child.inherit_from == 0


def test_a_better_copy_among_the_island_best_keep_is_copied():
    pbt = PBT(SPACE, 2, worker=1, keep=2)
    own = [result(0, 0.5, 0), result(1, 0.9, 1)]
    visitor = result(7, 0.1, 5, version=1)
    for ind in (*own, visitor):
        pbt.tell(ind)
    child = pbt.ask([visitor, *own], random.Random(0), 9)
    assert child.parents == (7, 1) and child.inherit_from == 7
    unheld = PBT(SPACE, 2, worker=1, keep=0)  # not among the best keep: its weights may be gone
    for ind in (*own, visitor):
        unheld.tell(ind)
    assert unheld.ask([visitor, *own], random.Random(0), 9).parents == (0, 1)


def test_a_ga_child_inherits_from_its_better_parent_with_the_same_shapes():
    ranked = [result(4, 0.1, 0, params={**START, "layers": 2}), result(7, 0.2, 0)]
    child = Individual(id=9, params=dict(START), origin=Origin.GA, parents=(7, 4))
    assert better_parent(child, ranked) == 4
    assert better_parent(child, ranked, shape_params=("layers",)) == 7  # 4's shapes differ
    neither = Individual(id=10, params={**START, "layers": 4}, origin=Origin.GA, parents=(7, 4))
    assert better_parent(neither, ranked, shape_params=("layers",)) == NO_PARENT
    assert better_parent(Individual(id=9, params=dict(START)), ranked) == NO_PARENT

    class Fixed:
        def ask(self, ranked: Any, rng: Any, ident: int) -> Individual:
            return Individual(id=ident, params=dict(START), origin=Origin.GA, parents=(4, 7))

        def tell(self, result: Individual) -> None:
            pass

    assert Inheriting(Fixed()).ask(ranked, random.Random(0), 12).inherit_from == 4


def saved(store: CheckpointStore, *ids: int) -> None:
    for ident in ids:
        store.save(ident, 1, {"w": np.arange(4.0)})


def test_retention_keeps_the_island_best_and_deletes_the_rest_as_they_drop_out(tmp_path):
    store = CheckpointStore(RunPaths(tmp_path), "run-a")
    population = Population()
    kept = Retention(store, keep=2, ranked=population.ranked, job=0, worker=0, grace=0.0)
    for ident, loss in ((0, 0.5), (1, 0.4), (2, 0.9), (3, 0.1)):
        saved(store, ident)
        ind = result(ident, loss, 0)
        kept.finished(ind)
        population.learn(ind)
        kept.learn(ind)
        kept.written([ident])
    assert sorted(store.paths.checkpoint_files()) == [1, 3]
    failed = result(4, math.nan, 0, status=Status.FAILED)
    saved(store, 4)
    kept.finished(failed)
    assert 4 in store.paths.checkpoint_files()  # until its row is in the record
    kept.written([4])
    assert 4 not in store.paths.checkpoint_files()
    off = Retention(store, keep=0, ranked=population.ranked, job=0, worker=0, grace=0.0)
    off.finished(result(1, 0.4, 0))
    off.written([1])
    assert sorted(store.paths.checkpoint_files()) == [3]


def test_retention_keeps_pbt_members_until_they_are_replaced(tmp_path):
    store = CheckpointStore(RunPaths(tmp_path), "run-a")
    population = Population()
    kept = Retention(store, keep=1, ranked=population.ranked, job=0, worker=0,
                     pbt=True, grace=0.0)
    inds = [result(0, 0.1, 0), result(1, 0.9, 0),
            result(2, 0.8, 0, origin=Origin.PBT, parents=(1, NO_PARENT), inherit_from=1)]
    for ind in inds:
        saved(store, ind.id)
        kept.finished(ind)
        population.learn(ind)
        kept.learn(ind)
        kept.written([ind.id])
    assert sorted(store.paths.checkpoint_files()) == [0, 2]  # 1 was trained on by 2


def test_retention_holds_no_copy_from_another_island_as_a_pbt_member(tmp_path):
    store = CheckpointStore(RunPaths(tmp_path), "run-a")
    kept = Retention(store, keep=1, ranked=Population().ranked, job=0, worker=0, pbt=True)
    kept.learn(result(0, 0.1, 0))
    kept.learn(result(7, 0.2, 3, version=1))
    assert kept.members == {0}


def test_interrupted_inheriting_evaluations_continue_with_their_lineage():
    rows = np.zeros(2, dtype=individual_dtype(SPACE))
    for n, (ident, status) in enumerate(((7, Status.INTERRUPTED), (8, Status.OK))):
        rows[n]["id"], rows[n]["status"], rows[n]["inherit_from"] = ident, int(status), 3
        rows[n]["inherit_epoch"], rows[n]["parent_a"], rows[n]["parent_b"] = 5, 3, NO_PARENT
        rows[n]["origin"] = int(Origin.PBT)
        for name, value in START.items():
            rows[n][name] = value
    unrecorded = {9: {"params": START, "origin": int(Origin.GA), "parents": [3, 4],
                      "inherit_from": 4, "inherit_epoch": 2}}
    waiting = to_continue(rows, SPACE, unrecorded)
    assert [(i.id, i.inherit_from, i.inherit_epoch, i.origin) for i in waiting] == [
        (7, 3, 5, Origin.PBT), (9, 4, 2, Origin.GA)]


@pytest.mark.parametrize(("setting", "message"), [
    ("inherit.enabled=1", "inherit.enabled: expected true or false, got 1"),
    ("inherit.keep=0", "inherit.keep: expected an integer >= 1, got 0"),
    ('inherit.shape_params=["depth"]', "inherit.shape_params: 'depth' is not a parameter of "
     "[space] (parameters: conv_layers, activation, lr, gamma)"),
    ("inherit.shape_params=3", "inherit.shape_params: expected a list of parameter names, got 3"),
    ("pbt.fraction=0.6", "pbt.fraction: expected a number > 0 and <= 0.5, got 0.6"),
    ("pbt.perturb=0", "pbt.perturb: expected a number > 0 and <= 0.99, got 0"),
    ("pbt.resample=2", "pbt.resample: expected a probability in [0, 1], got 2"),
    ('evolution.strategy="pdt"', "evolution.strategy: expected one of 'ga', 'cmaes', 'hybrid', "
     "'pbt', got 'pdt'; did you mean 'pbt'?"),
])
def test_bad_settings_are_one_line(setting: str, message: str):
    with pytest.raises(ConfigError) as err:
        load_config(None, [setting])
    assert str(err.value) == message


def test_a_bad_setting_stops_the_command_with_one_line_and_exit_2(tmp_path):
    done = run(atoll_cmd("search", "--run-dir", str(tmp_path / "run"), "--set",
                         'inherit.shape_params=["depth"]'))
    assert done.returncode == 2 and not (tmp_path / "run").exists()
    assert done.stderr.strip().splitlines() == ["atoll: error: inherit.shape_params: 'depth' is "
                                                "not a parameter of [space] (parameters: "
                                                "conv_layers, activation, lr, gamma)"]


# -- real searches --------------------------------------------------------------------------

DIGITS = ["objective.options.epochs=2", "objective.options.batch_size=32",
          "objective.options.patience=5", "search.islands=1", "migration.probability=0"]


def search(run_dir: Path, ranks: int, *settings: str) -> None:
    args = ["search", "--run-dir", str(run_dir)]
    for item in (*DIGITS, *settings):
        args += ["--set", item]
    done = mpirun_atoll(ranks, *args, timeout=400)
    assert done.returncode == 0, done.stderr[-4000:]


def table(run_dir: Path) -> tuple[dict[int, dict[str, Any]], dict[int, list[int]]]:
    """Individuals by id, and each one's recorded epochs."""
    run = open_run(run_dir)
    rows = {int(r["id"]): {name: r[name].item() if hasattr(r[name], "item") else r[name]
                           for name in run.individuals.dtype.names}
            for r in run.individuals}
    epochs: dict[int, list[int]] = {}
    for ident, epoch in zip(run.epochs["individual"].tolist(), run.epochs["epoch"].tolist(),
                            strict=True):
        epochs.setdefault(ident, []).append(epoch)
    return rows, {k: sorted(v) for k, v in epochs.items()}


def check_lineage(rows: dict[int, dict[str, Any]], epochs: dict[int, list[int]],
                  own: int = 2) -> int:
    """Every inheriting individual continued at its parent's last epoch + 1 and trained its own
    ``own`` epochs; the others started at 0 and trained 2. Returns how many inherited."""
    inherited = 0
    for ident, row in rows.items():
        parent = row["inherit_from"]
        if parent == NO_PARENT:
            assert row["inherit_epoch"] == NO_EPOCH and epochs[ident] == [0, 1], row
            continue
        inherited += 1
        assert row["inherit_epoch"] == epochs[parent][-1], row
        start = row["inherit_epoch"] + 1
        assert epochs[ident] == list(range(start, start + own)), row
        assert row["conv_layers"] == rows[parent]["conv_layers"]
    return inherited


@pytest.fixture(scope="module")
def ga_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("inherit") / "ga"
    search(run_dir, 2, "search.ranks_per_worker=2", "search.generations=8",
           "inherit.enabled=true", "inherit.keep=2", "space.conv_layers.high=3",
           "objective.options.inherited_epochs=1")
    return run_dir


@pytest.mark.slow  # digits training under mpirun
def test_ga_children_continue_from_their_better_parents_checkpoint(ga_run):
    """... for their own ``inherited_epochs`` (1, where those from scratch train 2)."""
    rows, epochs = table(ga_run)
    assert check_lineage(rows, epochs, own=1) >= 1
    declined = 0
    for ident, row in rows.items():
        parents = [p for p in (row["parent_a"], row["parent_b"]) if p != NO_PARENT]
        if row["origin"] != int(Origin.GA) or not parents:
            continue
        better = min(parents, key=lambda p: (rows[p]["loss"], p))
        if rows[better]["conv_layers"] == row["conv_layers"]:
            # its parent was among the best 2 (the GA's pool): its checkpoint was still kept
            assert row["inherit_from"] == better, row
        else:  # the classifier declined the other shapes and trained from scratch
            assert row["inherit_from"] == NO_PARENT and epochs[ident][0] == 0
            declined += 1
    logs = "".join(p.read_text() for p in (ga_run / "logs").glob("*.log"))
    assert logs.count("shapes differ") == declined  # said once each
    # with the way out: no inherit.shape_params kept these children from such parents
    assert logs.count("list it in inherit.shape_params") == declined


@pytest.mark.slow  # digits training under mpirun
def test_ga_retention_keeps_only_the_best_checkpoints(ga_run):
    rows, _ = table(ga_run)
    usable = sorted((r["loss"], i) for i, r in rows.items() if r["status"] == int(Status.OK))
    files = sorted(RunPaths(ga_run).checkpoint_files())
    assert files == sorted(i for _, i in usable[:2])


@pytest.fixture(scope="module")
def pbt_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("inherit") / "pbt"
    search(run_dir, 2, "search.ranks_per_worker=1", "search.generations=5",
           "evolution.strategy=\"pbt\"", "inherit.keep=1",
           "inherit.shape_params=[\"conv_layers\"]", "pbt.fraction=0.5")
    return run_dir


def members(rows: dict[int, dict[str, Any]]) -> set[int]:
    """PBT's members: the individuals no PBT child replaced. None may be replaced twice (two
    children of one member at once would make two lineages of one, and grow the population)."""
    replaced = [row["parent_b"] if row["parent_b"] != NO_PARENT else row["parent_a"]
                for row in rows.values() if row["origin"] == int(Origin.PBT)]
    assert len(replaced) == len(set(replaced)), sorted(replaced)
    return set(rows) - set(replaced)


@pytest.mark.slow  # digits training under mpirun
def test_pbt_members_train_on_or_copy_a_top_member(pbt_run):
    rows, epochs = table(pbt_run)
    bred = [r for r in rows.values() if r["origin"] == int(Origin.PBT)]
    # new members start at random until a worker has heard of 4 (results arrive asynchronously)
    randoms = sum(r["origin"] == int(Origin.RANDOM) for r in rows.values())
    assert randoms >= 4 and len(bred) == 10 - randoms >= 3
    assert check_lineage(rows, epochs) == len(bred)
    for row in bred:
        assert row["inherit_from"] == row["parent_a"]
        if row["parent_b"] == NO_PARENT:  # trained on with its own parameters
            assert all(row[p] == rows[row["parent_a"]][p] for p in ("lr", "gamma", "activation"))
    # retention: the best one and the members not replaced, nothing else
    usable = sorted((r["loss"], i) for i, r in rows.items() if r["status"] == int(Status.OK))
    wanted = {usable[0][1]} | members(rows)
    assert set(RunPaths(pbt_run).checkpoint_files()) == wanted
    assert len(wanted) <= 1 + 4


@pytest.mark.slow  # digits training under mpirun
def test_the_report_draws_the_lineage(pbt_run):
    done = run(atoll_cmd("report", str(pbt_run)))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "lineage.png" in done.stdout and "Lineage" not in done.stdout.split("Skipped")[-1]
    png = pbt_run / "report" / "lineage.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert 'src="data:image/png;base64,' in (pbt_run / "report" / "report.html").read_text()


@pytest.mark.slow  # digits training under mpirun
def test_pbt_lineage_is_restored_and_inherited_across_a_resume(pbt_run):
    before, _ = table(pbt_run)
    individuals, migrations = read_history(pbt_run, 1)
    population = restore_population(individuals, migrations, open_run(pbt_run).space,
                                    plan_layout(2, 1, 1), 0)
    for ind in population:
        assert (ind.inherit_from, ind.inherit_epoch) == (
            before[ind.id]["inherit_from"], before[ind.id]["inherit_epoch"])
    args = ["resume", str(pbt_run), "--set", "search.evaluations=14"]
    done = mpirun_atoll(2, *args, timeout=400)
    assert done.returncode == 0, done.stderr[-4000:]
    rows, epochs = table(pbt_run)
    assert len(rows) == 14
    assert all(rows[i]["inherit_from"] == r["inherit_from"] for i, r in before.items())
    check_lineage(rows, epochs)
    across = [r for i, r in rows.items() if i not in before and r["inherit_from"] in before]
    assert across  # the next job's children started from checkpoints the first job kept


PBT_ISLANDS_CONFIG = "seed = {seed}\n" + LINEAGE_DEMO + """[search]
evaluations = 80
islands = 2
[evolution]
strategy = "pbt"
[migration]
mode = "migration"
probability = 1.0
[inherit]
keep = 1
"""


@pytest.mark.parametrize("seed", [1, 2])
def test_pbt_islands_keep_their_own_members_while_copies_come_and_go(tmp_path, seed):
    """4 workers on 2 PBT islands, every result sent to the other island: each island fills
    its population (4) with members of its own, and the checkpoints left are its members' and
    a few more (each island's best ``keep``, each worker's next emigrant), not every copy that
    ever arrived. Asked to move them, PBT islands copy their emigrants (one warning says so),
    so a resume restores every member's lineage at home: moved, a member away at the stop
    was restored only where it went, and its lineage ended at home."""
    config = tmp_path / "pbt.toml"
    config.write_text(PBT_ISLANDS_CONFIG.format(seed=seed))
    done = mpirun_atoll(4, "search", "-q", "--config", str(config), "--run-dir",
                        str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr[-4000:]
    rows, _ = table(tmp_path / "run")
    assert sum(r["origin"] == int(Origin.PBT) for r in rows.values()) >= 60
    for island in (0, 1):
        started = [r for r in rows.values()
                   if r["island"] == island and r["origin"] == int(Origin.RANDOM)]
        assert len(started) >= 4, (island, len(started))
    lineages = members(rows)
    files = set(RunPaths(tmp_path / "run").checkpoint_files())
    assert lineages <= files and len(lineages) >= 8
    assert len(files - lineages) <= 2 * (1 + 2), sorted(files - lineages)
    assert done.stderr.count("PBT island(s) 0, 1 copy their emigrants") == 1, done.stderr
    individuals, migrations = read_history(tmp_path / "run", 1)
    modes = {value: name for name, value in h5py.check_enum_dtype(migrations.dtype["mode"]).items()}
    assert len(migrations) >= 60 and {modes[m] for m in migrations["mode"].tolist()} == \
        {"pollination"}
    for island in (0, 1):
        restored = restore_population(individuals, migrations, open_run(tmp_path / "run").space,
                                      plan_layout(4, 1, 2), island)
        home = {i for i in lineages if rows[i]["island"] == island}
        assert home <= {ind.id for ind in restored if ind.active}, island
    # One island for both: every lineage goes on there; none that a copy had ended (a copy
    # here used to be no member, so the member it replaced came back, its checkpoint gone).
    done = mpirun_atoll(4, "resume", "-q", str(tmp_path / "run"), "--set", "search.islands=1",
                        "--set", "search.evaluations=110")
    assert done.returncode == 0, done.stderr[-4000:]
    assert "not kept" not in done.stderr, done.stderr[-4000:]
    after, _ = table(tmp_path / "run")
    members(after)  # no member replaced twice on the one island
    new = {i: r for i, r in after.items() if i not in rows}
    replaced = {r["parent_b"] if r["parent_b"] != NO_PARENT else r["parent_a"]
                for r in new.values() if r["origin"] == int(Origin.PBT)}
    assert replaced and replaced <= lineages | set(new), sorted(replaced - lineages - set(new))


# -- atoll inspect names the lineage ----------------------------------------------------------

LINEAGE_CONFIG = "seed = 5\n" + LINEAGE_DEMO + """[search]
evaluations = 16
islands = 1
[evolution]
strategy = "ga"  # the hybrid's CMA-ES children have no parent to inherit from
[inherit]
enabled = {enabled}
"""


def inspect_best(tmp_path: Path, enabled: bool) -> tuple[list[str], dict[int, dict[str, Any]]]:
    """A real 2-rank search of lineage_demo; the lines of its best table as `atoll inspect`
    prints them, and the record's individuals."""
    config = tmp_path / f"lineage-{enabled}.toml"
    config.write_text(LINEAGE_CONFIG.format(enabled=str(enabled).lower()))
    run_dir = tmp_path / f"run-{enabled}"
    done = mpirun_atoll(2, "search", "-q", "--config", str(config), "--run-dir", str(run_dir))
    assert done.returncode == 0, done.stderr[-4000:]
    shown = run(atoll_cmd("inspect", str(run_dir), "--top", "16"))  # all of them
    assert shown.returncode == 0, shown.stderr[-2000:]
    lines = shown.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Best "))
    return list(itertools.takewhile(lambda line: line.startswith("  "), lines[start + 1:])), \
        table(run_dir)[0]


def test_inspect_says_whose_checkpoint_each_best_individual_inherited(tmp_path):
    lines, rows = inspect_best(tmp_path, enabled=True)
    assert lines[0].rstrip().endswith("inherited from"), lines[0]
    shown = 0
    for line in lines[1:]:
        ident = int(line.split()[0])
        parent, epoch = rows[ident]["inherit_from"], rows[ident]["inherit_epoch"]
        if parent == NO_PARENT:
            assert line.endswith(" -"), line
        else:
            assert line.endswith(f" {parent} (epoch {epoch})"), line
            shown += 1
    inheritors = [i for i, row in rows.items() if row["inherit_from"] != NO_PARENT
                  and row["status"] == int(Status.OK)]
    assert shown == len(inheritors) >= 1


def test_inspect_shows_no_lineage_for_a_run_without_inheritance(tmp_path):
    lines, rows = inspect_best(tmp_path, enabled=False)
    assert all(r["inherit_from"] == NO_PARENT for r in rows.values())
    assert "inherited" not in "\n".join(lines) and len(lines) > 2


def test_under_asha_a_child_of_a_fully_trained_parent_trains_unjudged(tmp_path):
    """A child's epochs number on from its parent's, and only completed individuals are
    parents: under asha it starts past the last rung, so it never pauses, while candidates
    from scratch do (README, "Inherited weights and population-based training")."""
    config = tmp_path / "asha.toml"
    config.write_text(LINEAGE_CONFIG.format(enabled="true") + '[pruning]\nrule = "asha"\n'
                      "eta = 2\nmin_epochs = 1\nmax_epochs = 2\n")  # one rung: after epoch 0
    run_dir = tmp_path / "run"
    done = mpirun_atoll(2, "search", "-q", "--config", str(config), "--run-dir", str(run_dir),
                        "--set", "search.evaluations=24")
    assert done.returncode == 0, done.stderr[-4000:]
    rows, epochs = table(run_dir)
    history = read_history(run_dir, 1)[0]
    paused = set(history["id"][history["status"] == int(Status.PAUSED)].tolist())
    children = {i for i, r in rows.items() if r["inherit_from"] != NO_PARENT}
    assert children and paused and not children & paused
    assert all(epochs[i][0] >= 2 for i in children)  # past the rung, past max_epochs


@pytest.mark.parametrize("strategy", ["hybrid", "cmaes", "ga"])
def test_inheriting_with_cmaes_candidates_is_said_once(tmp_path, strategy):
    """CMA-ES's candidates have no parents: with inherit.enabled they train from scratch, and
    the user hears it instead of finding that nothing inherited."""
    done = run(atoll_cmd("search", "--config", "examples/sphere.toml", "--run-dir",
                         str(tmp_path / "run"), "-q", "--set", "search.generations=2",
                         "--set", "inherit.enabled=true", "--set",
                         f"evolution.strategy={strategy}"))
    assert done.returncode == 0, done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() if "inherit.enabled:" in line]
    if strategy == "ga":
        assert said == [], done.stderr
    else:
        assert len(said) == 1 and f"(evolution strategy '{strategy}')" in said[0], done.stderr

