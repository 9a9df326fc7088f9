"""benchmarks/training_ray.py (make bench-training) kept from rotting between its runs: what the
Ray side is asked to run, how its reports become curves and rows, and (slow, where
benchmarks/.venv-ray exists) one tiny real Ray Tune search of each scheduler with DDP trials."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.append(str(BENCHMARKS))  # after tests/: its objectives.py is not the tests' one

import common  # noqa: E402
import training_ray as peer  # noqa: E402
import training_reuse as reuse  # noqa: E402


def test_make_bench_training_runs_it_after_training_reuse_and_make_bench_leaves_it_out():
    done = subprocess.run(["make", "-n", "-W", "pyproject.toml", "bench-training"],
                          cwd=BENCHMARKS.parent, capture_output=True, text=True, timeout=60)
    only = re.search(r"--only (\S+)", done.stdout)
    assert only, done.stdout
    chosen = only.group(1).split(",")
    assert chosen.index("training_reuse") < chosen.index("training_ray")
    done = subprocess.run(
        [sys.executable, "-c", "import run; print(run.MEASUREMENTS['training_ray'].__file__);"
         "print(' '.join(run.DEFAULT))"], cwd=BENCHMARKS, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(BENCHMARKS.parent / "app")},
        timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    module, default = done.stdout.splitlines()
    assert Path(module) == BENCHMARKS / "training_ray.py"
    assert "training_ray" not in default.split()


def test_the_ray_venv_gets_the_torch_atoll_is_installed_with():
    makefile = (BENCHMARKS.parent / "Makefile").read_text()
    pins = re.search(r"^TORCH_PINS := (.*)$", makefile, re.M)
    assert pins and common.TORCH_PIN in pins.group(1).split()
    assert common.TORCH_PIN in common.RAY_PINS


def test_the_ray_side_gets_atolls_space_data_and_budget_for_every_task_and_seed(tmp_path):
    tasks = peer.ray_tasks(tmp_path)
    assert len(tasks) == len(reuse.TASKS) * len(peer.PEERS) * len(peer.SEEDS)
    assert {(t["task"], t["scheduler"], t["seed"]) for t in tasks} == {
        (task, method, seed) for task in reuse.TASKS for method in peer.PEERS
        for seed in peer.SEEDS}
    # Ray's seeds are training_reuse's first ones: its rows judge searches that ran anyway
    assert peer.SEEDS == reuse.SEEDS[:len(peer.SEEDS)]
    for task in tasks:
        assert task["dataset"] == reuse.TASKS[task["task"]][1]
        assert task["budget"] == reuse.BUDGET and task["max_t"] == reuse.EPOCHS
        assert task["ready"] == reuse.READY
        assert (task["batch_size"], task["val_fraction"]) == (64, 0.2)
        assert task["space"] == {"conv_layers": [1, 3], "activation": ["relu", "tanh"],
                                 "lr": [0.1, 3.0], "gamma": [0.95, 1.0]}


def test_a_ray_curve_is_the_running_best_in_report_order_cut_at_the_budget():
    reports = [{"time": 3.0, "val_accuracy": 0.5}, {"time": 1.0, "val_accuracy": 0.2},
               {"time": 2.0, "val_accuracy": 0.7}, {"time": 4.0, "val_accuracy": 0.9}]
    assert peer.ray_curve(reports, budget=3).tolist() == [0.2, 0.7, 0.7]
    assert peer.ray_curve(reports, budget=10).tolist() == [0.2, 0.7, 0.7, 0.9]
    assert len(peer.ray_curve([], budget=3)) == 0


def test_the_rows_set_each_atoll_method_against_its_ray_scheduler():
    budget = reuse.BUDGET
    full = [reuse.running_best(np.linspace(0.1, top, budget)) for top in (0.5, 0.6, 0.7)]
    early = [reuse.running_best([0.1] * 29 + [0.65] * (budget - 29)) for _ in range(3)]
    late = [reuse.running_best([0.1] * 59 + [0.62] * (budget - 59)) for _ in range(3)]
    never = [reuse.running_best([0.1] * budget) for _ in range(3)]
    rows, note = peer.judge("t", {"full GA": full, "ASHA": early, "PBT": never},
                            {"ASHA": late, "PBT": early})
    assert len(rows) == 4 and all(r.passed is None and r.target == "report" for r in rows)
    asha_epochs, asha_best, pbt_epochs, pbt_best = rows
    assert "0.6000" in asha_epochs.measurement and "ASHAScheduler" in asha_epochs.measurement
    assert (asha_epochs.atoll, asha_epochs.other, asha_epochs.ratio) == \
        ("30 epochs", "60 epochs", "0.50")
    assert (asha_best.atoll, asha_best.other, asha_best.ratio) == ("0.6500", "0.6200", "+0.0300")
    assert "PopulationBasedTraining" in pbt_epochs.measurement
    assert (pbt_epochs.atoll, pbt_epochs.ratio) == ("never", "-")
    assert pbt_best.ratio == "-0.5500"
    assert "Ray PBT: 0.6500 (target after 30 epochs)" in note


def test_atolls_curves_are_the_searches_training_reuse_made_in_this_process(tmp_path):
    made = {(task, method, seed): reuse.running_best([0.1 * seed, 0.2 * seed])
            for task in reuse.TASKS for method in reuse.METHODS for seed in reuse.SEEDS}
    reuse.SEARCHED.update(made)
    try:
        curves = peer.atoll_curves(tmp_path, "digits")
    finally:
        reuse.SEARCHED.clear()
    assert set(curves) == {peer.REFERENCE, *peer.PEERS}
    for method, paths in curves.items():
        assert [p is made[("digits", method, s)] for p, s in zip(paths, peer.SEEDS,
                                                                  strict=True)] == [True] * 3
    assert not list(tmp_path.glob("digits-*")), "no search may run when the curves exist"


def test_kept_ray_searches_are_not_run_again_and_new_ones_are_kept_as_they_end(tmp_path,
                                                                               monkeypatch):
    from search_cache import RAY_TRAINING, SearchCache

    tasks = peer.ray_tasks(tmp_path, seeds=(1,))[:2]
    kept = {"reports": [{"time": 1.0, "val_accuracy": 0.5}], "trials": [], "errors": [],
            "seconds": 2.0}
    SearchCache(tmp_path / "searches").put(RAY_TRAINING, tasks[0], kept)
    ran: list[dict] = []

    def side(scratch: Path, asked: list[dict]) -> list[dict]:  # stands in for Ray's hours
        ran.extend(asked)
        return [{**kept, "seconds": 3.0} for _ in asked]

    monkeypatch.setattr(peer, "run_ray", side)
    monkeypatch.setattr(peer, "CACHE", SearchCache(tmp_path / "searches"))
    assert peer.ray_results(tmp_path, tasks, log=lambda line: None) == [
        kept, {**kept, "seconds": 3.0}]
    assert ran == [tasks[1]]
    again = SearchCache(tmp_path / "searches")  # a later run, on a fresh clone
    assert again.get(RAY_TRAINING, tasks[1])["seconds"] == 3.0


@pytest.mark.slow
def test_a_tiny_ray_search_of_each_scheduler_trains_ddp_trials_and_pbt_continues_them(tmp_path):
    if not common.RAY_PYTHON.exists():
        pytest.skip(f"no {common.RAY_VENV}: `benchmarks/run.py --only training_ray` makes it")
    tasks = [t for t in peer.ray_tasks(tmp_path, budget=12, seeds=(2,), ready=2)
             if t["task"] == "digits"]
    results = peer.run_ray(tmp_path, tasks)
    for task, result in zip(tasks, results, strict=True):
        assert result["errors"] == [], result["errors"]
        assert len(result["reports"]) >= task["budget"], task["scheduler"]
        assert all(t["ranks"] == [2] for t in result["trials"])
        curve = peer.ray_curve(result["reports"], task["budget"])
        assert len(curve) == task["budget"] and 0.1 < curve[-1] <= 1.0
    pbt = results[[t["scheduler"] for t in tasks].index("PBT")]
    # 4 members of 2 epochs each before the 12 are spent, 2 at a time: some were paused at a
    # perturbation and went on from a checkpoint (their own or one PBT copied), their epochs
    # numbered on from it (a fresh start would count from 1 again).
    assert any(len(t["epochs"]) > 2 and t["epochs"][2] > 2 for t in pbt["trials"])
