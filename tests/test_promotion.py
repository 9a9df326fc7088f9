"""ASHA's promotion form (``pruning.rule = "asha"``): the rungs alone, the claims on real
checkpoint files, island loops over the in-memory mailbox, then real mpirun searches with
2-rank workers and a resume."""

from __future__ import annotations

import itertools
import math
import random
import re
import textwrap
import tomllib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np
import pytest

from atoll.config import MigrationConfig, PruningConfig, parse_config
from atoll.engine.island import Budget, IslandLoop, breeding_rng
from atoll.engine.memory import MemoryPost, MemoryRecorder
from atoll.engine.paused import paused_on, paused_rows, to_resume, without_checkpoint
from atoll.engine.population import Population
from atoll.engine.topology import Layout
from atoll.evolution import Continue, ga_strategy
from atoll.evolution.pbt import PBT
from atoll.evolution.strategy import ContinueFirst, PromoteFirst
from atoll.individual import FINISHED, Individual, Status
from atoll.record import RunPaths, open_run, promotion, read_history
from atoll.record.checkpoints import CheckpointStore
from atoll.record.schema import individual_dtype
from atoll.scheduling import Asha, Verdict
from atoll.scheduling.worker import WorkerScheduling
from atoll.space import Space
from conftest import ROOT, atoll_cmd, mpirun_atoll, run, search_then_still

GO, PAUSE = Verdict.CONTINUE, Verdict.PAUSE
SETTINGS = PruningConfig(rule="asha", eta=2, min_epochs=1)  # rungs after epochs 0, 1, 3, ...


# -- the rungs ---------------------------------------------------------------------------------


def test_asha_pauses_outside_the_best_1_over_eta_and_never_stops():
    rungs = Asha(PruningConfig(rule="asha", eta=3, min_epochs=1))
    # Fewer than eta known: only the best so far goes on.
    assert [rungs.on_report(i, 0, v) for i, v in enumerate((0.5, 0.7, 0.4))] == [GO, PAUSE, GO]
    assert rungs.on_report(3, 0, 0.6) == PAUSE  # 4 known: only the best one goes on
    assert rungs.on_report(4, 0, 0.1) == GO
    assert rungs.on_report(5, 1, 9.0) == GO  # epoch 1 is no rung (rungs after 1, 3, 9 epochs)
    assert rungs.on_report(6, 0, math.nan) == GO  # a metric not reported is never judged
    assert Verdict.STOP not in {rungs.on_report(10 + i, 0, 5.0 + i) for i in range(20)}


def test_a_paused_individual_qualifies_once_enough_worse_values_reach_its_rung():
    rungs = Asha(SETTINGS)
    for ident, value in enumerate((0.1, 0.2)):
        rungs.on_report(ident, 0, value)
    assert rungs.on_report(2, 0, 0.3) == PAUSE  # best half of 3 is 1 value
    assert rungs.promotable([2]) == []
    rungs.learn_of(3, [(0, 0.9)])  # a partner's curve: 4 known, the best 2 qualify
    assert rungs.promotable([2]) == []
    rungs.learn_of(4, [(0, 0.8)])
    rungs.learn_of(5, [(0, 0.7)])  # 6 known: the best 3 (0.1, 0.2, 0.3)
    assert rungs.promotable([2]) == [(2, 0)]


def test_promotions_come_from_the_highest_rung_first_then_the_best():
    rungs = Asha(SETTINGS)
    for ident, value in enumerate((0.1, 0.2, 0.3, 0.4, 0.5, 0.6)):
        rungs.learn_of(ident, [(0, value)])
    for ident, value in ((6, 0.15), (7, 0.25)):
        rungs.learn_of(ident, [(0, value), (1, value)])  # 6 and 7 reached rung 1
    rungs.learn_of(8, [(1, 0.05)])
    # rung 0 keeps the best 4 of 8 (<= 0.25); rung 1 the best 1 of 3 (0.05)
    assert rungs.promotable([1, 2, 6, 7, 8]) == [(8, 1), (1, 0)]
    assert rungs.promotable([7]) == []  # its last rung is 1, where it is not among the best


def test_a_part_of_a_curve_arriving_late_does_not_move_an_individual_down_a_rung():
    rungs = Asha(SETTINGS)
    rungs.learn_of(1, [(1, 0.2)])
    rungs.learn_of(1, [(0, 0.3)])  # an earlier part, from another partner
    for ident in (2, 3):
        rungs.learn_of(ident, [(1, 0.9)])
    assert rungs.promotable([1]) == [(1, 1)]


def test_maximize_keeps_the_highest_values():
    rungs = Asha(PruningConfig(rule="asha", eta=2, direction="maximize"))
    assert [rungs.on_report(i, 0, v) for i, v in enumerate((0.1, 0.9, 0.5))] == [GO, GO, PAUSE]
    rungs.learn_of(3, [(0, 0.0)])
    assert rungs.promotable([2]) == [(2, 0)]


# -- claims on real checkpoint files -----------------------------------------------------------


def saved(tmp_path: Path, *epochs_by_id: tuple[int, int]) -> RunPaths:
    paths = RunPaths(tmp_path)
    store = CheckpointStore(paths, "run")
    for ident, epoch in epochs_by_id:
        store.save(ident, epoch, {"epoch": np.array(epoch)})
    return paths


@pytest.fixture(params=["links made", "links refused"])
def folder(request, tmp_path):
    """A folder on a file system that makes hard links, and one on a file system that
    refuses them."""
    if request.param == "links refused":
        return request.getfixturevalue("no_hard_links")
    return tmp_path


def test_of_two_claims_on_one_paused_individual_one_wins(folder):
    paths = saved(folder, (7, 1))
    assert promotion.claim(paths, 7, 1) == "won"
    assert promotion.claim(paths, 7, 1) == "taken"
    assert promotion.held(paths) == {7}
    assert paths.checkpoint_files() == {7: paths.checkpoint_file(7)}  # a claim is no checkpoint
    promotion.release(paths, 7)
    assert promotion.held(paths) == set()
    assert promotion.claim(paths, 7, 1) == "won"


def test_a_claim_from_the_wrong_rung_or_without_checkpoint_fails(folder):
    paths = saved(folder, (7, 3))
    assert promotion.claim(paths, 7, 1) == "stale"  # it was paused again since, at epoch 3
    assert promotion.held(paths) == set()
    assert promotion.claim(paths, 8, 0) == "gone"


def ask_twice(tmp_path: Path) -> tuple[list[object], PromoteFirst, PromoteFirst]:
    """Two workers of an island know the same paused individual and ask at the same time."""
    paths = saved(tmp_path, (2, 0))
    space = Space.from_dict({"x": {"type": "float", "low": 0.0, "high": 1.0}})
    workers = []
    for _ in range(2):
        rungs = Asha(SETTINGS)
        for ident, value in enumerate((0.1, 0.5, 0.3, 0.9)):
            rungs.learn_of(ident, [(0, value)])
        wrapper = PromoteFirst(ga_strategy(space, 4), rungs,
                               lambda i, e: promotion.claim(paths, i, e))
        wrapper.tell(Individual(2, {"x": 0.3}, status=Status.PAUSED))
        workers.append(wrapper)
    rng = random.Random(1)
    return [w.ask([], rng, 100 + n) for n, w in enumerate(workers)], *workers


def test_two_workers_asking_at_once_promote_a_paused_individual_once(tmp_path):
    (first, second), one, other = ask_twice(tmp_path)
    assert isinstance(first, Continue) and first.individual.id == 2
    assert isinstance(second, Individual) and second.id == 101  # bred: it lost the claim
    assert one.paused == {} and other.paused == {}  # the loser forgets it too
    promotion.release(RunPaths(tmp_path), 2)


def test_a_paused_result_is_told_as_a_partial_one_and_never_a_parent(tmp_path):
    told = []

    class Recording:
        def ask(self, ranked, rng, ident):  # pragma: no cover - not asked here
            raise AssertionError

        def tell(self, result):
            told.append((result.id, result.status))

    wrapper = PromoteFirst(Recording(), Asha(SETTINGS), lambda i, e: "gone")
    population = Population()
    for status in (Status.PAUSED, Status.PAUSED, Status.OK):
        ind = Individual(5, {"x": 0.1}, status=status, loss=0.5)
        wrapper.tell(ind)
        population.learn(ind)
        if status == Status.PAUSED:
            assert 5 in wrapper.paused and population.ranked == []  # waits, no parent
    assert told == [(5, Status.PAUSED), (5, Status.PAUSED), (5, Status.OK)]
    assert wrapper.paused == {} and [i.id for i in population.ranked] == [5]


def test_pbt_makes_no_member_of_a_paused_result():
    pbt = PBT(SPACE, 2, 0)
    pbt.tell(Individual(5, {"x": 0.1}, status=Status.PAUSED, loss=0.5))
    assert pbt.members == {}
    pbt.tell(Individual(5, {"x": 0.1}, status=Status.OK, loss=0.4))
    assert list(pbt.members) == [5]


def test_pbt_trains_no_member_again_while_its_child_is_paused():
    """A member whose child is paused at a rung waits for it: the next ask takes another
    member, and once the child completes it is the member."""
    from atoll.individual import replaced_member

    pbt = PBT(SPACE, 2, 0)
    for ident, loss in ((1, 0.1), (2, 0.5)):
        pbt.tell(Individual(ident, {"x": loss}, status=Status.OK, loss=loss))
    child = pbt.ask([], random.Random(0), 3)
    assert replaced_member(child) == 1  # the member waiting longest
    child.status, child.loss = Status.PAUSED, 0.2
    pbt.tell(child)
    other = pbt.ask([], random.Random(0), 4)
    assert replaced_member(other) == 2
    child.status = Status.OK
    pbt.tell(child)
    assert sorted(pbt.members) == [2, 3] and pbt.busy == {2}  # the other child still trains


def test_a_pbt_worker_whose_members_all_wait_trains_a_partners_member_its_owner_then_skips():
    """Under ``asha`` a worker's own members can all have children paused at a rung. It
    then trains a partner's free member on, and the partner, told that child began, leaves
    that member alone: no member is ever replaced by two children (which would grow the
    population by one each time). With no member free anywhere, a new one starts."""
    from atoll.individual import Origin, replaced_member

    workers = [PBT(SPACE, 4, worker) for worker in (0, 1)]
    for pbt in workers:
        for ident, loss in ((1, 0.1), (2, 0.2), (3, 0.3), (4, 0.4)):
            pbt.tell(Individual(ident, {"x": loss}, status=Status.OK, loss=loss,
                                owner=(ident + 1) % 2, worker=(ident + 1) % 2))
    first, second = workers
    for ident in (10, 11):  # worker 0's members 1 and 3: both children pause at a rung
        child = first.ask([], random.Random(ident), ident)
        assert replaced_member(child) in (1, 3)
        second.started(child)
        child.status, child.loss = Status.PAUSED, 0.5
        for pbt in workers:
            pbt.tell(child)
    taken = first.ask([], random.Random(0), 12)
    assert replaced_member(taken) == 2  # worker 1's, waiting longest
    second.started(taken)
    own = second.ask([], random.Random(0), 13)
    assert replaced_member(own) == 4  # not 2, which worker 0 trains now
    first.started(own)
    fresh = first.ask([], random.Random(0), 14)  # 1 and 3 wait, 2 and 4 train
    assert fresh.origin == Origin.RANDOM and replaced_member(fresh) == -1
    for done in (taken, own):
        done.status, done.loss = Status.OK, 0.05
        for pbt in workers:
            pbt.tell(done)
    assert all(sorted(pbt.members) == [1, 3, 12, 13] for pbt in workers)
    assert all(pbt.busy == {1, 3} for pbt in workers)


def test_a_resumed_pbt_worker_leaves_alone_the_member_an_interrupted_child_replaces(tmp_path):
    """A resume deals the interrupted evaluations out in turn and the members in turn, each
    without the other: worker 1 may own the member whose interrupted child worker 0 continues.
    No message could warn it before it breeds its first, so every worker's PBT knows from the
    start which members the continued children replace."""
    from mpi4py import MPI

    from atoll.engine.topology import Topology, plan_layout
    from atoll.individual import Origin, replaced_member
    from atoll.job.runner import _strategy

    config = parse_config({"objective": {"name": "sphere"}, "space": {
        "x": {"type": "float", "low": 0.0, "high": 1.0}}, "evolution": {
        "strategy": "pbt", "population_size": 2}})
    layout = plan_layout(2, 1, 1)
    child = Individual(7, {"x": 0.3}, status=Status.INTERRUPTED, origin=Origin.PBT,
                       parents=(2, -1), inherit_from=2, worker=0, owner=0)
    chosen = {}
    for worker in (0, 1):
        topo = Topology(layout, MPI.COMM_SELF, MPI.COMM_SELF, MPI.COMM_SELF, worker, 0)
        strategy, hears = _strategy(config, RunPaths(tmp_path), topo, None, [child], [])
        assert hears is not None
        for ident, loss in ((2, 0.1), (3, 0.2)):  # both members are worker 1's
            strategy.tell(Individual(ident, {"x": loss}, status=Status.OK, loss=loss,
                                     worker=1, owner=1))
        chosen[worker] = strategy.ask([], random.Random(0), 10 + worker)
    assert isinstance(chosen[0], Continue) and chosen[0].individual.id == 7  # worker 0's share
    assert replaced_member(chosen[1]) == 3  # not member 2, which that child replaces
    # On 2 islands the child goes to worker 1 (island 1) and lives on there: at home on
    # island 0 its member trains on, never held for a child that will not come back.
    other = Individual(5, {"x": 0.4}, status=Status.INTERRUPTED, worker=0, owner=0)
    topo = Topology(plan_layout(2, 1, 2), MPI.COMM_SELF, MPI.COMM_SELF, MPI.COMM_SELF, 0, 0)
    strategy, _ = _strategy(config, RunPaths(tmp_path), topo, None, [other, child], [])
    assert isinstance(strategy, ContinueFirst) and [i.id for i in strategy.waiting] == [5]
    pbt = strategy.strategy
    assert isinstance(pbt, PBT) and pbt.busy == set()
    # A child paused at the island's rung holds its member from the start too.
    waits = Individual(8, {"x": 0.5}, status=Status.PAUSED, origin=Origin.PBT, parents=(3, -1))
    topo = Topology(layout, MPI.COMM_SELF, MPI.COMM_SELF, MPI.COMM_SELF, 1, 0)
    strategy, _ = _strategy(config, RunPaths(tmp_path), topo, None, [child], [waits])
    assert isinstance(strategy, PBT) and strategy.busy == {2, 3}


def test_a_paused_pbt_child_leaves_its_members_checkpoint_until_it_completes(tmp_path):
    """The checkpoints a PBT island keeps follow PBT's members: a child paused at a rung does
    not yet replace the member it trained on, which PBT may still hand out or copy."""
    from atoll.evolution.pbt import PBT
    from atoll.individual import NO_PARENT, Origin
    from atoll.record.checkpoints import Retention

    store = CheckpointStore(RunPaths(tmp_path), "run")
    population = Population()
    kept = Retention(store, keep=1, ranked=population.ranked, job=0, worker=0, pbt=True,
                     grace=0.0)
    pbt = PBT(SPACE, 2, 0)

    def learn(ind: Individual) -> None:  # as the island loop: population, strategy, listeners
        population.learn(ind)
        pbt.tell(ind)
        kept.learn(ind)

    for ident, loss in ((1, 0.1), (2, 0.5)):
        store.save(ident, 1, {"w": np.arange(2.0)})
        member = Individual(ident, {"x": loss}, status=Status.OK, loss=loss)
        kept.finished(member)
        learn(member)
        kept.written([ident])
    store.save(3, 2, {"w": np.arange(2.0)})
    child = Individual(3, {"x": 0.5}, status=Status.PAUSED, loss=0.5, origin=Origin.PBT,
                       parents=(2, NO_PARENT), inherit_from=2)
    learn(child)
    assert sorted(pbt.members) == sorted(kept.members) == [1, 2]
    assert store.paths.checkpoint_file(2).exists()
    done = Individual(3, {"x": 0.5}, status=Status.OK, loss=0.4, origin=Origin.PBT,
                      parents=(2, NO_PARENT), inherit_from=2)
    kept.finished(done)
    learn(done)
    kept.written([3])
    assert sorted(pbt.members) == sorted(kept.members) == [1, 3]
    assert not store.paths.checkpoint_file(2).exists()


# -- island loops over the in-memory mailbox ---------------------------------------------------

EPOCHS = 4  # rungs after 1 and 2 epochs; the last epoch is none
SPACE = Space.from_dict({"x": {"type": "float", "low": 0.0, "high": 1.0}})


class Trainer:
    """One worker's evaluation: continue from the checkpoint, keep one after each epoch, ask
    the worker's scheduler (the real wiring, on a one-rank communicator) after each."""

    def __init__(self, paths: RunPaths, trained: dict[int, list[int]], bred: list[int],
                 clock: Iterator[int]) -> None:
        from mpi4py import MPI

        self.paths, self.trained, self.bred, self.clock = paths, trained, bred, clock
        self.store = CheckpointStore(paths, "run")
        self.pruning = WorkerScheduling(Asha(SETTINGS), "val_loss", MPI.COMM_SELF)
        self.loop: IslandLoop | None = None

    def __call__(self, ind: Individual) -> None:
        saved = self.store.load(ind.id)
        start = saved.epoch + 1 if saved is not None else 0
        if saved is None:  # bred: no paused individual of the island qualified
            assert self.loop is not None and isinstance(self.loop.strategy, PromoteFirst)
            assert self.pruning.rungs is not None
            assert self.pruning.rungs.promotable(self.loop.strategy.paused) == []
            self.bred.append(ind.id)
        ind.status, ind.started = Status.OK, float(next(self.clock))  # the island's order
        for epoch in range(start, EPOCHS):
            self.trained[ind.id].append(epoch)
            self.store.save(ind.id, epoch, {"epoch": np.array(epoch)})
            value = ind.params["x"] + 1.0 / (epoch + 1)
            if self.pruning.judge(ind.id, epoch, {"val_loss": value}) == PAUSE:
                ind.status = Status.PAUSED
                break
        ind.loss, ind.finished = ind.params["x"], ind.started + 0.5
        if ind.status in FINISHED:
            self.store.discard(ind.id)
        promotion.release(self.paths, ind.id)
        self.pruning.finished(ind)


def island(tmp_path: Path, workers: int) -> tuple[list[IslandLoop], list[MemoryRecorder],
                                                   dict[int, list[int]], list[int]]:
    paths = RunPaths(tmp_path)
    post = MemoryPost(workers)
    trained: dict[int, list[int]] = defaultdict(list)
    bred: list[int] = []
    clock = itertools.count()
    loops, recorders = [], []
    for w in range(workers):
        trainer = Trainer(paths, trained, bred, clock)
        assert trainer.pruning.rungs is not None
        strategy = PromoteFirst(ga_strategy(SPACE, 4), trainer.pruning.rungs,
                                lambda i, e: promotion.claim(paths, i, e))
        recorders.append(MemoryRecorder())
        trainer.loop = IslandLoop(
            layout=Layout(workers, 1, 1), worker=w, mailbox=post.mailbox(w), strategy=strategy,
            evaluate=trainer, recorder=recorders[-1], migration=MigrationConfig(),
            rng=breeding_rng(4, 0, w), curves=trainer.pruning)
        loops.append(trainer.loop)
    return loops, recorders, trained, bred


def test_an_island_promotes_paused_individuals_before_it_breeds_and_each_once(tmp_path):
    loops, recorders, trained, bred = island(tmp_path, workers=3)
    for generation in range(20):
        for loop in loops:
            loop.step(generation)
    rows = [ind for rec in recorders for ind in rec.individuals]
    parts: dict[int, list[Individual]] = defaultdict(list)
    for ind in rows:
        parts[ind.id].append(ind)
    promoted = [i for i, p in parts.items() if len(p) > 1]
    assert len(promoted) >= 3 and len(bred) == len(parts)
    assert any(len({p.worker for p in parts[i]}) > 1 for i in promoted)  # whichever is free
    for ident, mine in parts.items():
        mine.sort(key=lambda p: p.started)
        assert trained[ident] == list(range(len(trained[ident])))  # each epoch once, in order
        assert all(p.status == Status.PAUSED for p in mine[:-1])  # promoted only when paused
        assert sum(p.status in FINISHED for p in mine) <= 1
    still = {i for i, p in parts.items() if p[-1].status == Status.PAUSED}
    assert still and set(RunPaths(tmp_path).checkpoint_files()) == still
    assert promotion.held(RunPaths(tmp_path)) == set()
    parents = {p for ind in rows for p in ind.parents}
    assert not parents & {i for i, p in parts.items() if p[-1].status != Status.OK}


def test_a_paused_evaluation_spends_no_budget(tmp_path):
    loops, recorders, trained, bred = island(tmp_path, workers=1)
    stats = loops[0].run(Budget(8))
    rows = recorders[0].individuals
    assert sum(ind.status in FINISHED for ind in rows) == 8 == stats.completed
    assert stats.evaluations == len(rows) > 8
    assert any(ind.status == Status.PAUSED for ind in rows)


# -- the record of paused individuals, on resume -----------------------------------------------


def test_a_resume_finds_paused_individuals_and_continues_a_cut_promotion():
    rows = np.zeros(5, dtype=individual_dtype(SPACE))
    # id 1: paused, promoted, finished (its parts in any file order); id 2: paused twice;
    # id 3: paused, and a killed job was promoting it; id 4: interrupted
    rows["id"] = [1, 1, 2, 3, 4]
    rows["status"] = [int(s) for s in (Status.OK, Status.PAUSED, Status.PAUSED, Status.PAUSED,
                                       Status.INTERRUPTED)]
    rows["started"] = [5.0, 1.0, 4.0, 2.0, 3.0]
    rows["inherit_from"], rows["inherit_epoch"] = [-1, -1, 7, -1, -1], [-1, -1, 2, -1, -1]
    layout = Layout(2, 1, 1)
    waiting = paused_rows(rows, cut={3})
    (paused,) = paused_on(waiting, SPACE, layout, 0, kept={1, 2, 3, 4})
    assert (paused.id, paused.inherit_from, paused.inherit_epoch) == (2, 7, 2)  # its lineage
    assert without_checkpoint(waiting, kept={1, 2, 3, 4}) == []
    # its checkpoint deleted: it can never be promoted
    assert paused_on(waiting, SPACE, layout, 0, kept={1, 3, 4}) == []
    assert without_checkpoint(waiting, kept={1, 3, 4}) == [2]
    assert to_resume(rows, cut={3})["id"].tolist() == [3, 4]


# -- real searches: 2-rank workers under mpirun --------------------------------------------------

CONFIG = """seed = 3  # random candidates (as published ASHA), 3 epochs: rungs after 1 and 2;
# later individuals are worse (drift), so paused ones soon qualify
[objective]
name = "objectives:promotion_demo"
[objective.options]
trace = "{trace}"
epochs = 3
drift = 0.05
checkpoints = {checkpoints}
sleep = {sleep}
[space.x]
type = "float"
low = 0.0
high = 1.0
[search]
evaluations = {evaluations}
ranks_per_worker = 2
[evolution]
random_init = 1.0
[pruning]
rule = "asha"
eta = 2
min_epochs = 1
"""


def write_config(tmp_path: Path, evaluations: int, checkpoints: bool = True,
                 sleep: float = 0.0) -> Path:
    trace = tmp_path / "trace"
    trace.mkdir(exist_ok=True)
    path = tmp_path / "asha.toml"
    path.write_text(CONFIG.format(trace=trace, evaluations=evaluations,
                                  checkpoints=str(checkpoints).lower(), sleep=sleep))
    return path


def traces(tmp_path: Path, ident: int) -> list[list[int]]:
    return [[int(e) for e in (tmp_path / "trace" / f"{ident}-rank{r}.txt").read_text().split()]
            for r in range(2)]


def check_parts(tmp_path: Path, run_dir: Path, jobs: int) -> tuple[np.ndarray, set[int]]:
    """Every row of the run: each epoch of each individual trained once on both ranks, paused
    parts before its last, each id finished at most once; the ids promoted."""
    rows = read_history(run_dir, jobs)[0]
    promoted = set()
    for ident in np.unique(rows["id"]).tolist():
        mine = rows[rows["id"] == ident]
        mine = mine[np.argsort(mine["started"])]
        trained = traces(tmp_path, ident)
        assert trained[0] == trained[1] == list(range(len(trained[0])))
        assert np.isin(mine["status"][:-1], [int(Status.PAUSED), int(Status.INTERRUPTED)]).all()
        assert np.count_nonzero(np.isin(mine["status"], FINISHED)) <= 1
        if np.count_nonzero(mine["status"] == int(Status.PAUSED)) and len(mine) > 1:
            promoted.add(ident)
    return rows, promoted


def test_two_rank_workers_pause_and_promote_each_epoch_trained_once(tmp_path, folder):
    run_dir = folder / "run"
    done = mpirun_atoll(4, "search", "--config", str(write_config(tmp_path, 16)), "--run-dir",
                        str(run_dir), "-q")
    assert done.returncode == 0, done.stderr[-3000:]
    rows, promoted = check_parts(tmp_path, run_dir, 1)
    assert len(promoted) >= 3 and len(set(rows["worker"].tolist())) == 2
    ind = open_run(run_dir).individuals
    status = ind["status"]
    assert np.count_nonzero(np.isin(status, FINISHED)) == 16  # the budget: each id once
    paused = set(ind["id"][status == int(Status.PAUSED)].tolist())
    assert paused and set(RunPaths(run_dir).checkpoint_files()) == paused  # kept, to promote
    assert promotion.held(RunPaths(run_dir)) == set()
    for row in ind[status == int(Status.OK)]:
        assert traces(tmp_path, int(row["id"]))[0] == [0, 1, 2]
    shown = run(atoll_cmd("inspect", str(run_dir)))
    assert f"paused {len(paused)}" in shown.stdout
    assert f"{len(paused)} paused, not counted in it" in shown.stdout


def test_a_resume_promotes_the_paused_individuals_of_the_first_job(tmp_path):
    run_dir = tmp_path / "run"
    first = mpirun_atoll(4, "search", "--config", str(write_config(tmp_path, 8)), "--run-dir",
                         str(run_dir), "-q")
    assert first.returncode == 0, first.stderr[-3000:]
    ind = open_run(run_dir).individuals
    waiting = set(ind["id"][ind["status"] == int(Status.PAUSED)].tolist())
    assert len(waiting) >= 2
    # As if job 0 had been killed while it promoted the worst paused one: its claim is left.
    paths = RunPaths(run_dir)
    cut = int(ind["id"][ind["status"] == int(Status.PAUSED)][np.argmax(
        ind["loss"][ind["status"] == int(Status.PAUSED)])])
    with h5py.File(paths.checkpoint_file(cut), "r") as f:
        assert promotion.claim(paths, cut, int(f.attrs["epoch"])) == "won"
    # ... and as if the user had deleted the best paused one's checkpoint: it cannot go on.
    gone = int(ind["id"][ind["status"] == int(Status.PAUSED)][np.argmin(
        ind["loss"][ind["status"] == int(Status.PAUSED)])])
    paths.checkpoint_file(gone).unlink()
    parts_of_gone = np.count_nonzero(read_history(run_dir, 1)[0]["id"] == gone)
    # ... and as if it had been killed after a promotion's row was written, before its claim
    # went (an empty claim, as where hard links are refused): the claim goes, nothing else
    done = int(ind["id"][ind["status"] == int(Status.OK)][0])
    paths.promotion_claim(done).touch()
    again = mpirun_atoll(4, "resume", str(run_dir), "--set", "search.evaluations=24", "-q")
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count("paused individual(s) have no checkpoint any more") == 1
    assert f"1 paused individual(s) have no checkpoint any more ({paths.checkpoint_file(gone)}" \
        in again.stderr
    waiting.discard(gone)
    rows, promoted = check_parts(tmp_path, run_dir, 2)
    assert promoted & waiting  # paused in job 0, continued in job 1 from their checkpoints
    later = read_history(run_dir, 2)[0]
    assert np.count_nonzero(np.isin(later["status"], FINISHED)) == 24
    assert np.count_nonzero(later["id"] == cut) >= 2 and promotion.held(paths) == set()
    assert np.count_nonzero(later["id"] == gone) == parts_of_gone  # job 1 never ran it
    logs = "".join(p.read_text() for p in (run_dir / "logs").glob("job001-*.log"))
    said = re.findall(r"continuing (\d+) interrupted evaluation\(s\), each where it ran if "
                      r"this layout has its worker, under their ids: ([\d, ]+)\n", logs)
    shares = [int(i) for line in re.findall(r"this worker continues ([\d, ]+)\n", logs)
              for i in line.split(", ")]
    assert len(said) == 1 and cut in shares  # the total once (worker 0), each share apart
    assert sorted(int(i) for i in said[0][1].split(", ")) == sorted(shares)
    assert int(said[0][0]) == len(shares)
    # inspect counts it apart from the paused individuals a resume can still promote.
    still = np.count_nonzero(open_run(run_dir).individuals["status"] == int(Status.PAUSED)) - 1
    shown = run(atoll_cmd("inspect", str(run_dir)))
    assert "1 paused individual has no checkpoint any more" in shown.stdout
    waiting_line = [line for line in shown.stdout.splitlines() if "waiting for promotion" in line]
    assert waiting_line == [] if still == 0 else waiting_line[0].startswith(f"{still} individual")


def shown_durations(run_dir: Path, top: int) -> dict[int, float]:
    """Id -> the duration `atoll report` shows in its table of the best individuals."""
    shown = run(atoll_cmd("report", str(run_dir), "--top", str(top), "--no-plots", "--out",
                          str(run_dir.parent / "report")))
    assert shown.returncode == 0, shown.stderr[-2000:]
    lines = shown.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Best "))
    header = re.split(r"\s{2,}", lines[start + 1].strip())
    column = header.index("duration (s)")
    table = itertools.takewhile(lambda line: line.startswith("  "), lines[start + 2:])
    return {int(cells[0]): float(cells[column]) for cells in map(str.split, table)}


def test_a_promoted_individual_shows_the_time_of_all_its_parts(tmp_path):
    """results.h5's eval_seconds sums every part of an evaluation (paused at a rung, continued
    later, maybe by the other worker), its parts table holds the earlier parts, and the views
    count them: the report's duration, the timeline's busy time."""
    from atoll.views.plots.timeline import worker_shares

    run_dir, sleep = tmp_path / "run", 0.1
    done = mpirun_atoll(2, "search", "--config", str(write_config(tmp_path, 12, sleep=sleep)),
                        "--run-dir", str(run_dir), "-q", "--set", "search.ranks_per_worker=1")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_history(run_dir, 1)[0]  # every part, as the worker files keep them
    took: dict[int, float] = defaultdict(float)
    for row in rows:
        took[int(row["id"])] += float(row["finished"] - row["started"])
    results = open_run(run_dir / "results.h5")
    ind, parts = results.individuals, results.parts
    assert ind["id"].tolist() == sorted(took)
    assert np.allclose(ind["eval_seconds"], [took[i] for i in ind["id"].tolist()], atol=1e-6)
    assert len(parts) == len(rows) - len(ind) and set(parts["status"].tolist()) == {
        int(Status.PAUSED)}
    earlier = {(int(r["id"]), int(r["worker"]), float(r["started"])) for r in rows} - {
        (int(r["id"]), int(r["worker"]), float(r["started"])) for r in ind}
    assert {(int(p["individual"]), int(p["worker"]), float(p["started"]))
            for p in parts} == earlier
    promoted = ind[np.isin(ind["id"], parts["individual"]) & (ind["status"] == int(Status.OK))]
    assert len(promoted) >= 2
    for row in promoted:  # each earlier part trained an epoch at least
        count = np.count_nonzero(parts["individual"] == row["id"])
        assert row["eval_seconds"] >= row["finished"] - row["started"] + count * sleep
        assert row["eval_seconds"] >= 3 * sleep  # its three epochs
    durations = shown_durations(run_dir, 12)
    assert len(durations) >= 2 and set(durations) & set(promoted["id"].tolist())
    for ident, seconds in durations.items():
        assert seconds == pytest.approx(took[ident], rel=1e-3, abs=1e-3)
    span = float(results.jobs["stop"][0] - results.jobs["start"][0])
    busy = sum(share["busy"] for share in worker_shares(results).values()) * span
    assert busy == pytest.approx(sum(took.values()), rel=1e-6)


def test_an_objective_keeping_no_checkpoints_is_stopped_instead_said_once_per_worker(tmp_path):
    run_dir = tmp_path / "run"
    done = mpirun_atoll(4, "search", "--config", str(write_config(tmp_path, 12, False)),
                        "--run-dir", str(run_dir), "-q")
    assert done.returncode == 0, done.stderr[-3000:]
    status = open_run(run_dir).individuals["status"]
    assert not np.count_nonzero(status == int(Status.PAUSED))
    assert np.count_nonzero(status == int(Status.PRUNED))
    assert done.stderr.count("saved no checkpoint at that epoch") == 2  # two workers


def test_the_readme_shows_a_valid_asha_config():
    (block,) = re.findall(r"^  ```toml\n(.*?)^  ```", (ROOT / "README.md").read_text(),
                          re.S | re.M)
    table = tomllib.loads(textwrap.dedent(block))
    config = parse_config({"objective": {"name": "sphere"}, **table})
    assert config.pruning.pauses and config.pruning.eta == 3


def test_a_kill_right_after_a_promotion_ended_keeps_its_row_and_claims_nothing(tmp_path):
    """A promoted evaluation's claim went at once and its row up to a flush interval later: a
    kill between left the individual paused at its old rung with a checkpoint past it, which
    no job could ever promote again (its training lost). The row is now in the record before
    the claim goes."""
    run_dir, trace, marked = search_then_still(tmp_path, write_config(tmp_path, 12),
                                               "promotion_demo", "promoted")
    parts = len((trace / f"parts-{marked}.txt").read_text().split())
    assert parts >= 2  # paused, then promoted at least once
    rows = read_history(run_dir, 1)[0]
    assert np.count_nonzero(rows["id"] == marked) == parts  # the promoted part's row is in
    assert not RunPaths(run_dir).promotion_claim(marked).exists()
    (trace / "go").touch()
    done = run(atoll_cmd("resume", str(run_dir)), timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_history(run_dir, 2)[0]
    assert np.count_nonzero(np.isin(rows["status"], FINISHED)) == 12
    for ident in np.unique(rows["id"]).tolist():  # every epoch trained once, in every part
        trained = (trace / f"{ident}-rank0.txt").read_text().split()
        assert trained == [str(e) for e in range(len(trained))], (ident, trained)
