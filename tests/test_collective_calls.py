"""Collective ``ctx`` calls made on some ranks of a worker only: one clear error naming the
call and the ranks, never a hang, and the worker goes on (real mpirun, 2-rank workers)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from atoll.individual import Status
from atoll.record import open_run
from conftest import mpirun_atoll

MISUSE = "is collective, but not every rank of the worker called it: "


@pytest.mark.parametrize("way,settings,expected", [
    ("leader_reports", [], "CollectiveCallError: ctx.report(epoch=0) " + MISUSE
     + "rank 1 ended the evaluation without it"),
    ("follower_device", [], "CollectiveCallError: the first use of ctx.process_group or "
     "ctx.device " + MISUSE + "rank 0 ended the evaluation without it"),
    ("follower_busy", ["distributed.timeout=1", "objective.options.sleep=2"],
     "CollectiveCallError: ctx.report(epoch=0) " + MISUSE
     + "rank 1 did not call it within distributed.timeout = 1 s"),
    ("follower_busy", ["search.eval_timeout=1", "objective.options.sleep=2"],
     "CollectiveCallError: ctx.report(epoch=0) " + MISUSE
     + "rank 1 had not called it when search.eval_timeout ran out"),
    ("leader_late", ["search.eval_timeout=1", "objective.options.sleep=2"],
     "rank 0: EvaluationTimeout: evaluation exceeded search.eval_timeout = 1 s; rank 1: "
     "CollectiveCallError: ctx.report(epoch=0) " + MISUSE
     + "rank 0 ended the evaluation without it"),
])
def test_a_collective_call_on_some_ranks_fails_the_individual_and_the_worker_goes_on(
        tmp_path, way, settings, expected):
    run_dir = tmp_path / "run"
    sets = [arg for s in settings for arg in ("--set", s)]
    started = time.monotonic()
    done = mpirun_atoll(
        4, "search", "--config", "tests/configs/slow_sphere.toml", "--run-dir", str(run_dir),
        "--set", "objective.name=objectives:collective_on_some_ranks",
        "--set", f"objective.options.way={way}", "--set", "objective.options.rate=0.3",
        "--set", "search.generations=8", "--set", "search.ranks_per_worker=2",
        "--set", "distributed.backend=gloo", *sets, "-q", timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert time.monotonic() - started < 120
    ind = open_run(run_dir).individuals
    assert len(ind) == 8 * 4 // 2
    failed = ind[ind["status"] == int(Status.FAILED)]
    assert len(failed) >= 1
    assert all(expected in e and "\n" not in e for e in failed["error"]), set(failed["error"])
    for error in failed["error"]:  # another rank's error is said on the console, not only kept
        if error.startswith("rank"):
            assert f"failed on its worker's ranks: {error}" in done.stderr
    # every worker evaluates the individual after a failure, and it completes
    ok = ind[ind["status"] == int(Status.OK)]
    assert np.isfinite(ok["loss"]).all()
    for row in failed:
        later = ind[(ind["worker"] == row["worker"]) & (ind["id"] > row["id"])]
        assert not len(later) or later["status"].tolist().count(int(Status.OK)) >= 1
    assert len(ok) >= len(ind) // 3


def _two_rank_search(tmp_path, objective: str, *settings: str):
    run_dir = tmp_path / "run"
    sets = [arg for s in settings for arg in ("--set", s)]
    done = mpirun_atoll(
        4, "search", "--config", "tests/configs/slow_sphere.toml", "--run-dir", str(run_dir),
        "--set", f"objective.name=objectives:{objective}", "--set", "search.generations=3",
        "--set", "search.ranks_per_worker=2", "--set", "distributed.backend=gloo", *sets, "-q",
        timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return open_run(run_dir)


def test_the_leaders_metrics_count_and_may_come_in_several_reports_per_epoch(tmp_path):
    """Followers pass None (their metrics are not read); an epoch's train_loss and val_loss
    reported apart both reach the record, one row per epoch."""
    run = _two_rank_search(tmp_path, "split_reports")
    ind, epochs = run.individuals, run.epochs
    assert (ind["status"] == int(Status.OK)).all() and len(ind) == 6
    assert len(epochs) == 2 * len(ind)
    for row in ind:
        mine = epochs[epochs["individual"] == row["id"]]
        assert mine["epoch"].tolist() == [0, 1]
        assert np.allclose(mine["train_loss"], [row["loss"] + 1, row["loss"]])
        assert np.allclose(mine["val_loss"], [row["loss"] + 2, row["loss"] + 1])


def test_a_fractional_epoch_is_one_line_not_an_epoch_cut_short(tmp_path):
    run = _two_rank_search(tmp_path, "split_reports", "objective.options.epoch_step=0.5")
    ind = run.individuals
    assert (ind["status"] == int(Status.FAILED)).all()
    assert all("ctx.report: epoch must be a whole number (0, 1, 2, ...), got 0.5" in e
               and "\n" not in e for e in ind["error"]), set(ind["error"])
