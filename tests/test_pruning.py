"""Pruning (``[pruning]``): the median rule and successive halving alone, then real mpirun
searches whose workers have two ranks (real gloo-free MPI collectives per epoch) and real HDF5
records."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from atoll.config import MigrationConfig, PruningConfig, load_config
from atoll.engine.island import IslandLoop, breeding_rng
from atoll.engine.memory import MemoryPost, MemoryRecorder
from atoll.engine.topology import Layout
from atoll.evolution import ga_strategy
from atoll.individual import Individual, Status
from atoll.record import RunPaths, open_run
from atoll.scheduling import MedianRule, SuccessiveHalving, Verdict
from atoll.scheduling.halving import is_rung
from atoll.scheduling.worker import WorkerScheduling, _restored, make_scheduler
from atoll.space import Space
from conftest import atoll_cmd, mpirun_atoll, run

CONFIG = """seed = 5
[objective]
name = "objectives:pruning_demo"
[objective.options]
trace = "{trace}"
epochs = 4
[space.x]
type = "float"
low = 0.0
high = 1.0
[evolution]
random_init = {random_init}
[pruning]
rule = "{rule}"
warmup_epochs = 1
min_completed = {min_completed}
"""


def write_config(tmp_path: Path, *, min_completed: int, random_init: float = 0.3,
                 rule: str = "median") -> Path:
    trace = tmp_path / "trace"
    trace.mkdir()
    path = tmp_path / "pruning.toml"
    path.write_text(CONFIG.format(trace=trace, min_completed=min_completed,
                                  random_init=random_init, rule=rule))
    return path


STOP, GO = Verdict.STOP, Verdict.CONTINUE


def test_the_median_rule_waits_for_warmup_and_enough_completed_curves():
    rule = MedianRule(PruningConfig(rule="median", warmup_epochs=1, min_completed=3))
    for ident, value in enumerate((0.2, 0.4, 0.6)):
        for epoch in range(3):
            assert rule.on_report(ident, epoch, value) == GO  # fewer than 3 completed
        rule.on_complete(ident, completed=True)
    assert rule.on_report(10, 0, 0.9) == GO  # epoch 0 is warm-up
    assert rule.on_report(10, 1, 0.5) == STOP  # worse than the median 0.4 at epoch 1
    assert rule.on_report(11, 1, 0.4) == GO and rule.on_report(12, 2, 0.1) == GO
    assert rule.on_report(13, 5, 9.0) == GO  # nobody completed epoch 5
    assert rule.on_report(14, 1, math.nan) == GO  # a metric not reported is never judged
    rule.on_complete(10, completed=False)  # a pruned curve is not a reference
    assert rule.completed_at(1) == 3


def test_maximize_compares_the_other_way():
    rule = MedianRule(PruningConfig(rule="median", direction="maximize", warmup_epochs=0,
                                    min_completed=1))
    rule.learn([(0, 0.8)])
    assert rule.on_report(1, 0, 0.5) == STOP and rule.on_report(2, 0, 0.9) == GO


def test_halving_rungs_lie_after_min_epochs_times_powers_of_eta():
    rungs = [e for e in range(100) if is_rung(e, min_epochs=2, eta=3)]
    assert rungs == [1, 5, 17, 53]  # after 2, 6, 18, 54 epochs
    assert [e for e in range(30) if is_rung(e, min_epochs=1, eta=2)] == [0, 1, 3, 7, 15]


@pytest.mark.parametrize("rule", ["halving", "asha"])
def test_the_last_epoch_of_a_full_evaluation_is_no_rung(rule):
    """With max_epochs = 27 and eta = 3, epoch 26 would be a rung: an evaluation that trained
    every epoch is neither stopped nor paused there; the rungs before it are judged as usual."""
    said = PruningConfig(rule=rule, eta=3, min_epochs=1, max_epochs=27)
    judged = make_scheduler(said)
    for _ in range(6):  # six completed curves, all better than what follows
        judged.learn([(e, 0.1) for e in range(27)])
    assert judged.on_report(99, 26, 5.0) == GO
    assert judged.on_report(99, 8, 5.0) != GO  # a rung before the last is judged
    unsaid = make_scheduler(PruningConfig(rule=rule, eta=3, min_epochs=1))
    for _ in range(6):
        unsaid.learn([(e, 0.1) for e in range(27)])
    assert unsaid.on_report(99, 26, 5.0) != GO


def test_halving_keeps_the_best_third_at_a_rung_and_judges_only_rungs():
    rule = SuccessiveHalving(PruningConfig(rule="halving", eta=3, min_epochs=1))
    assert rule.on_report(0, 0, 0.5) == GO  # the only value at its rung
    assert rule.on_report(1, 0, 0.9) == STOP  # 2 < eta known: only the best so far goes on
    assert rule.on_report(2, 0, 0.7) == STOP  # 3 known: only the best (0.5) goes on
    assert rule.on_report(3, 0, 0.1) == GO  # the new best
    assert rule.on_report(4, 1, 99.0) == GO  # epoch 1 is no rung with eta 3 (rungs 0, 2, 8)
    rule.learn([(2, 0.3), (2, 0.4), (2, 0.6), (2, 0.8), (2, 0.9)])  # completed elsewhere
    # 6 known at the rung after 3 epochs: the best 2 (0.3, and 0.35 itself) go on.
    assert rule.on_report(5, 2, 0.35) == GO and rule.on_report(6, 2, 0.5) == STOP
    assert rule.on_report(7, 2, math.nan) == GO  # a metric not reported is never judged


def test_halving_maximizes_the_other_way():
    rule = SuccessiveHalving(PruningConfig(rule="halving", direction="maximize", eta=2))
    rule.learn([(0, 0.8)])
    assert rule.on_report(1, 0, 0.5) == STOP
    assert rule.on_report(2, 0, 0.9) == GO


def traces(tmp_path: Path, ident: int, ranks: int) -> list[list[int]]:
    return [[int(e) for e in (tmp_path / "trace" / f"{ident}-rank{r}.txt").read_text().split()]
            for r in range(ranks)]


@pytest.mark.parametrize("rule", ["median", "halving"])
def test_two_rank_workers_stop_on_the_same_epoch(tmp_path, rule):
    config = write_config(tmp_path, min_completed=3, rule=rule)
    run_dir = tmp_path / "run"
    done = mpirun_atoll(4, "search", "--config", str(config), "--run-dir", str(run_dir),
                        "--set", "search.ranks_per_worker=2", "--set", "search.generations=12",
                        "-q")
    assert done.returncode == 0, done.stderr[-3000:]
    run = open_run(run_dir)
    ind, epochs = run.individuals, run.epochs
    pruned = ind[ind["status"] == int(Status.PRUNED)]
    ok = ind[ind["status"] == int(Status.OK)]
    assert len(pruned) >= 3 and len(ok) >= 3 and len(ind) == 24
    for row in pruned:
        ident = int(row["id"])
        stopped = int(str(row["error"]).rsplit(" ", 1)[1])
        assert str(row["error"]) == f"pruned at epoch {stopped}"
        assert stopped >= 1 if rule == "median" else is_rung(stopped, min_epochs=1, eta=3)
        assert traces(tmp_path, ident, 2) == [list(range(stopped + 1))] * 2
        assert int(epochs["epoch"][epochs["individual"] == ident].max()) == stopped
        assert row["loss"] == row["x"]  # its value is what the objective returned
    for row in ok:
        assert traces(tmp_path, int(row["id"]), 2) == [[0, 1, 2, 3]] * 2
    # Pruned individuals are never parents.
    parents = set(ind["parent_a"].tolist()) | set(ind["parent_b"].tolist())
    assert not parents & set(pruned["id"].tolist())


def test_a_resume_rebuilds_the_rule_from_the_record(tmp_path):
    """Job 1 completes 6 curves and cannot prune (the rule wants 6); the resumed job prunes
    among its first 6 individuals, which it could not unless it had learned job 1's curves."""
    config = write_config(tmp_path, min_completed=6, random_init=1.0)
    run_dir = tmp_path / "run"
    first = mpirun_atoll(1, "search", "--config", str(config), "--run-dir", str(run_dir),
                         "--set", "search.evaluations=6", "-q")
    assert first.returncode == 0, first.stderr[-3000:]
    assert (open_run(run_dir).individuals["status"] == int(Status.OK)).all()
    again = mpirun_atoll(1, "resume", str(run_dir), "--set", "search.evaluations=14", "-q")
    assert again.returncode == 0, again.stderr[-3000:]
    ind = open_run(run_dir).individuals
    early = ind[(ind["id"] >= 6) & (ind["id"] < 12)]
    assert (early["status"] == int(Status.PRUNED)).any()
    assert np.count_nonzero(ind["status"] != int(Status.INTERRUPTED)) == 14


@pytest.mark.parametrize("stopped", [False, True], ids=["ended", "stopped by its wall time"])
def test_a_resume_rebuilds_the_rungs_from_every_value_reported_there(tmp_path, stopped):
    """Under halving a rung value counts whatever became of its evaluation, as partners heard
    it during the job: the rebuilt rung holds the pruned individuals' values too, and those of
    evaluations a wall time interrupted, which go on from their checkpoints."""
    config = write_config(tmp_path, min_completed=3, rule="halving", random_init=1.0)
    run_dir = tmp_path / "run"
    stop = ["--set", "objective.options.sleep=0.4", "--set", "objective.options.checkpoint=true",
            "--set", "search.wall_time=3"]
    done = mpirun_atoll(2, "search", "--config", str(config), "--run-dir", str(run_dir),
                        "--set", "search.evaluations=10", *(stop if stopped else []), "-q")
    assert done.returncode == (75 if stopped else 0), done.stderr[-3000:]
    run = open_run(run_dir)
    cut = Status.INTERRUPTED if stopped else Status.PRUNED
    assert (run.individuals["status"] == int(cut)).any()
    plan = SimpleNamespace(config=load_config(config), resumed=True)
    topo = SimpleNamespace(island=0, layout=Layout(2, 1, 1))
    rungs = _restored(plan, RunPaths(run_dir), topo)  # type: ignore[arg-type]
    first = run.epochs[run.epochs["epoch"] == 0]["val_loss"]
    assert len(first) == len(run.individuals)
    assert sorted(rungs._at_rung[0]) == sorted(first.tolist())  # type: ignore[union-attr]


def test_a_stop_that_meets_a_rung_leaves_the_verdict_to_the_rung(tmp_path):
    """A stop asked for at the very epoch of a rung: the rung still judges it (here: stopped),
    where it used to be recorded as interrupted and continued after that epoch, past a rung
    that never judged it."""
    config = tmp_path / "rung.toml"
    config.write_text(textwrap.dedent("""\
        seed = 1
        [objective]
        name = "objectives:stopped_at_a_rung"
        [space.x]
        type = "float"
        low = 0.0
        high = 1.0
        [search]
        evaluations = 4
        [evolution]
        random_init = 1.0
        [pruning]
        rule = "halving"
        eta = 2
        min_epochs = 1
        max_epochs = 4
        """))
    run_dir = tmp_path / "run"
    done = run(atoll_cmd("search", "--config", str(config), "--run-dir", str(run_dir), "-q"),
               timeout=120)
    assert done.returncode == 75, done.stderr[-3000:]
    ind = open_run(run_dir).individuals
    one = ind[ind["id"] == 1]
    assert [Status(int(s)) for s in one["status"]] == [Status.PRUNED], one
    assert one["error"][0] == "pruned at epoch 0"


def test_curves_reach_the_island_partners_with_the_results_not_through_files(tmp_path):
    """Two one-rank workers whose files are not flushed during the job (flush_interval of an
    hour): with 10 completed curves needed, a worker alone could prune from its 11th evaluation
    on; with its partner's curves, which travel with the partner's results, from about its
    6th."""
    config = write_config(tmp_path, min_completed=10, random_init=1.0)
    run_dir = tmp_path / "run"
    done = mpirun_atoll(2, "search", "--config", str(config), "--run-dir", str(run_dir),
                        "--set", "search.generations=14", "--set", "record.flush_interval=3600",
                        "-q")
    assert done.returncode == 0, done.stderr[-3000:]
    ind = open_run(run_dir).individuals
    early = ind[ind["generation"] < 10]
    assert (early["status"] == int(Status.PRUNED)).any()


def partners(rule: str) -> tuple[list[WorkerScheduling], MemoryPost]:
    """The schedulers of two one-rank workers of one island, each attached to its island loop
    over the in-memory mailbox, as a job wires them."""
    from mpi4py import MPI

    post = MemoryPost(2)
    space = Space.from_dict({"x": {"type": "float", "low": 0.0, "high": 1.0}})
    schedulers = []
    for worker in range(2):
        scheduling = WorkerScheduling(make_scheduler(PruningConfig(rule=rule, eta=2)),
                                      "val_loss", MPI.COMM_SELF)
        IslandLoop(layout=Layout(2, 1, 1), worker=worker, mailbox=post.mailbox(worker),
                   strategy=ga_strategy(space, 4), evaluate=lambda ind: None,
                   recorder=MemoryRecorder(), migration=MigrationConfig(),
                   rng=breeding_rng(1, 0, worker), curves=scheduling)
        schedulers.append(scheduling)
    return schedulers, post


@pytest.mark.parametrize("rule, outside", [("halving", Verdict.STOP),
                                           ("asha", Verdict.PAUSE)])
def test_rung_values_reach_the_island_partner_while_the_evaluations_run(rule, outside):
    """Worker 1 reports 0.1 at the first rung; worker 0, in the middle of its own evaluation,
    reports 0.9 there: with eta 2 and both values known, only the best goes on. Heard only
    with worker 1's result, 0.9 would go on (one value known)."""
    (first, second), post = partners(rule)
    assert second.judge(1, 0, {"val_loss": 0.1}) == GO
    assert second.judge(1, 2, {"val_loss": 0.05}) == GO  # no rung (rungs: epochs 0, 1, 3)
    assert [m[2] for m in post.inboxes[0]] == [(1, [(0, 0.1)])]
    assert first.judge(0, 0, {"val_loss": 0.9}) == outside
    assert post.inboxes[0] == [] and [m[2] for m in post.inboxes[1]] == [(0, [(0, 0.9)])]
    # Rung values went out as reported: a result carries no second copy of them.
    assert second.shared(Individual(1, {"x": 0.1}, status=Status.OK)) == []


def test_the_median_rule_shares_completed_curves_only_with_their_results():
    (first, second), post = partners("median")
    assert second.judge(1, 0, {"val_loss": 0.1}) == GO
    assert post.inboxes[0] == []
    assert second.shared(Individual(1, {"x": 0.1}, status=Status.OK)) == [(0, 0.1)]
    assert second.judge(2, 0, {"val_loss": 0.3}) == GO
    assert second.shared(Individual(2, {"x": 0.3}, status=Status.PRUNED)) == []


def test_a_metric_never_reported_is_said_once_per_worker_with_what_was_reported(tmp_path):
    """``val_acc`` against the objective's ``val_accuracy``: pruning would judge nothing."""
    warning = "pruning.metric = 'val_acc' was never reported (individual "
    for metric, warnings in (("val_acc", 2), ("val_accuracy", 0)):
        done = mpirun_atoll(
            2, "search", "--config", "tests/configs/report.toml", "--run-dir",
            str(tmp_path / metric), "--set", "objective.options.fail=0",
            "--set", "search.generations=6", "--set", "pruning.rule=median",
            "--set", f"pruning.metric={metric}", "--set", "pruning.direction=maximize", "-q")
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stderr.count(warning) == warnings, done.stderr[-3000:]
        assert done.stderr.count(" reported val_accuracy, val_loss): pruning stops nothing; "
                                 "set pruning.metric to a metric ctx.report gets") == warnings
