"""benchmarks/training_reuse.py (make bench-training) kept from rotting between its runs: the
spirals task it builds, every method's configuration, its verdicts, and one tiny real search."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from atoll.config import load_config
from atoll.record import open_run

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.append(str(BENCHMARKS))  # after tests/: its objectives.py is not the tests' one

import spirals  # noqa: E402
import training_reuse as reuse  # noqa: E402


def test_make_bench_leaves_it_out_and_make_bench_training_runs_it_alone():
    # In a process of its own: benchmarks/run.py imports benchmarks/objectives.py by the name
    # of the tests' objectives module.
    done = subprocess.run(
        [sys.executable, "-c", "import run; print(run.MEASUREMENTS['training_reuse'].__file__);"
         "print(' '.join(run.DEFAULT))"], cwd=BENCHMARKS, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(BENCHMARKS.parent / "app")}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    module, default = done.stdout.splitlines()
    assert Path(module) == BENCHMARKS / "training_reuse.py"
    assert {"training_reuse", "fidelity_ray"}.isdisjoint(default.split())
    assert "pruning" in default.split()


def test_a_results_file_says_what_ran_and_each_row_names_its_other_side(tmp_path):
    """RESULTS-training.md sets Atoll against the full-training GA and Ray Tune, not the
    peers of RESULTS.md: the title and the header must not name Propulate."""
    out = tmp_path / "RESULTS.md"
    code = ("import datetime, sys; from pathlib import Path; import common, run\n"
            "row = common.Row('epochs to the full GA\\'s best', '69', '117', '0.59', '<= 0.33', "
            "False)\n"
            "run.write_results(Path(sys.argv[1]), ['training_reuse', 'fidelity_ray'], [row], "
            "['a note'], {'nproc': '2'}, 'make bench-training', datetime.datetime.now(), 90.0, "
            "('1.00', '2.00'))\n")
    done = subprocess.run([sys.executable, "-c", code, str(out)], cwd=BENCHMARKS,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(BENCHMARKS.parent / "app")})
    assert done.returncode == 0, done.stderr[-2000:]
    text = out.read_text()
    assert text.startswith("# Atoll's benchmark results\n\n- measurements: training_reuse, "
                           "fidelity_ray\n")
    assert "Propulate" not in text.split("## What each side ran")[0]
    header, _, row = text.split("| measurement")[1].splitlines()[:3]
    assert "| other (as the row names it) |" in header and "| 117 " in row and "| FAIL " in row
    assert "Targets missed: 1:" in text and "- a note" in text


def test_the_spirals_task_is_the_same_everywhere_and_every_arm_is_well_filled():
    first, again = spirals.build("train"), spirals.build("train")
    assert torch_equal(first.images, again.images) and torch_equal(first.labels, again.labels)
    test = spirals.build("test")
    assert len(test) == spirals.SIZES["test"]
    assert not torch_equal(first.images[:10], test.images[:10])
    counts = np.bincount(first.labels.numpy(), minlength=spirals.CLASSES)
    assert len(counts) == spirals.CLASSES and counts.min() > 0.07 * len(first)
    assert first.shape == (1, 8, 8)


def torch_equal(a, b) -> bool:
    return a.shape == b.shape and bool((a == b).all())


@pytest.mark.parametrize("task", sorted(reuse.TASKS))
@pytest.mark.parametrize("method", sorted(reuse.METHODS))
def test_every_method_is_a_valid_configuration(tmp_path, task, method):
    config = load_config(reuse.write_config(tmp_path, task), reuse.METHODS[method])
    assert config.search.evaluations * config.objective.options["epochs"] >= reuse.BUDGET \
        or method == "ASHA"
    assert config.search.ranks_per_worker == 2
    assert config.evolution.strategy == ("pbt" if method == "PBT" else "ga")
    assert config.inherits == (method in ("PBT", "GA, inherited weights"))


def test_the_verdicts_follow_the_curves():
    budget = reuse.BUDGET
    full = [reuse.running_best(np.linspace(0.1, top, budget)) for top in (0.5, 0.6, 0.7)]
    early = [reuse.running_best([0.1] * 20 + [0.65] * (budget - 20)) for _ in range(3)]
    late = [reuse.running_best([0.1] * (budget - 1) + [0.65]) for _ in range(3)]
    worse = [reuse.running_best([0.1] * budget) for _ in range(3)]
    rows, note = reuse.judge("t", {"full GA": full, "ASHA": early,
                                   "GA, inherited weights": early, "PBT": worse})
    assert [r.passed for r in rows] == [True, True]
    assert rows[0].atoll == "21 epochs" and "0.6000" in rows[0].measurement
    assert rows[1].atoll == "0.6500 / 0.1000" and rows[1].other == "0.6000"
    assert "0.6500 in 240 epochs" in note
    rows, _ = reuse.judge("t", {"full GA": full, "ASHA": late,
                                "GA, inherited weights": worse, "PBT": early})
    assert [r.passed for r in rows] == [False, True]
    rows, _ = reuse.judge("t", {"full GA": full, "ASHA": worse,
                                "GA, inherited weights": worse, "PBT": worse})
    assert rows[0].atoll == "never" and [r.passed for r in rows] == [False, False]


@pytest.mark.slow  # a training search under mpirun
def test_a_tiny_search_counts_the_epochs_its_record_holds(tmp_path):
    config = reuse.write_config(tmp_path, "digits", epochs=2)
    path = reuse.search(tmp_path / "run", config, 1, ["search.evaluations=3"], ranks=2)
    epochs = open_run(tmp_path / "run").epochs
    assert len(path) == len(epochs) == 6
    assert (np.diff(path) >= 0).all() and path[-1] == epochs["val_accuracy"].max()
    assert len(reuse.still_rising(tmp_path / "run", at=(1, 2))) == 2
