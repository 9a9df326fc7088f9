"""``objective.direction = "maximize"``: real searches in subprocesses, real HDF5 files.

The engine only minimizes: the record's ``loss`` holds the negated value, and every view (the
end-of-job summary, inspect, progress lines, report, the API) shows the objective's own value.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

import atoll
from conftest import ROOT, atoll_cmd, mpi_env, run

ENV = mpi_env(PYTHONPATH=os.pathsep.join([str(ROOT / "app"), str(ROOT / "tests"), str(ROOT)]))
SETTINGS = ("--set", "objective.name=objectives:accuracy_demo", "--set", "search.islands=1",
            "--set", "search.generations=40", "--set", "objective.options.fail=0.0",
            "--set", "seed=3")


def search(run_dir: Path, direction: str, *extra: str) -> str:
    done = run(atoll_cmd("search", "--config", "tests/configs/report.toml", "--run-dir",
                         str(run_dir), *SETTINGS, "--set", f"objective.direction={direction}",
                         *extra), env=ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def scores(run_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """The recorded losses of the ok individuals and what their objective returned."""
    with h5py.File(run_dir / "results.h5", "r") as f:
        table = f["individuals"][: int(f["individuals"].attrs["rows"])]
    ok = table[table["status"] == 0]
    penalty = {b"relu": 0.0, b"tanh": 0.3, b"sigmoid": 1.0}
    # tests/objectives.py's accuracy_demo, recomputed from the recorded parameters.
    returned = np.array([1.0 / (1.0 + (np.log10(r["lr"]) + 2.0) ** 2 + penalty[r["act"]]
                                + 0.05 * int(r["layers"]) + 0.01) for r in ok])
    return ok["loss"].astype(float), returned


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    root = tmp_path_factory.mktemp("maximize")
    summary = search(root / "max", "maximize")
    search(root / "min", "minimize")
    return root / "max", summary, root / "min"


def test_the_record_holds_the_negated_value_and_the_search_climbs(runs):
    maximized, _, minimized = runs
    losses, returned = scores(maximized)
    np.testing.assert_allclose(losses, -returned, rtol=1e-12)
    _, returned_when_minimized = scores(minimized)
    # Same seed, same random start; breeding then goes opposite ways.
    assert np.median(returned) > np.median(returned_when_minimized)
    assert returned.max() > returned_when_minimized.max()


def test_summary_and_inspect_show_the_value_highest_first(runs):
    maximized, summary, _ = runs
    _, returned = scores(maximized)
    done = run(atoll_cmd("inspect", str(maximized), "--top", "3"), env=ENV)
    assert done.returncode == 0, done.stderr
    for text in (summary, done.stdout):
        lines = text.splitlines()
        head = next(i for i, line in enumerate(lines) if line.startswith("Best "))
        assert "highest value first" in lines[head]
        columns = lines[head + 1].split()
        assert columns[:3] == ["id", "value", "val_accuracy"]
        shown = [float(line.split()[1]) for line in lines[head + 2: head + 5]]
        assert shown == sorted(shown, reverse=True)
        assert shown[0] == pytest.approx(returned.max(), rel=1e-5)
        # The best epoch is the one whose val_accuracy is the returned value.
        assert float(lines[head + 2].split()[2]) == pytest.approx(shown[0], rel=1e-3)


def test_report_and_api_show_the_value(runs, tmp_path):
    maximized, _, _ = runs
    _, returned = scores(maximized)
    done = run(atoll_cmd("report", str(maximized), "--out", str(tmp_path), "--csv"), env=ENV)
    assert done.returncode == 0, done.stderr
    head = next(line for line in done.stdout.splitlines() if line.strip().startswith("id "))
    assert head.split()[:2] == ["id", "value"]
    best = atoll.best(maximized)
    assert best.value == pytest.approx(returned.max(), rel=1e-12)
    assert best.loss == -best.value
    # The CSV export is the record's own table: its loss column is the negated value.
    with open(tmp_path / "individuals.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "ok"]
    assert min(float(r["loss"]) for r in rows) == pytest.approx(-returned.max(), rel=1e-12)


def test_progress_lines_name_the_value(tmp_path):
    done = run(atoll_cmd("search", "--config", "tests/configs/report.toml", "--run-dir",
                         str(tmp_path / "run"), *SETTINGS, "--set", "search.generations=6",
                         "--set", "objective.options.sleep=0.05",  # a job the watcher sees run
                         "--set", "objective.direction=maximize", "-v",
                         "--progress-interval", "0.5"), env=ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    individuals = [line for line in done.stdout.splitlines() if "individual" in line
                   and line.startswith("[atoll]")]
    assert individuals and all(": ok, value " in line for line in individuals)
    assert any(" best value " in line for line in done.stdout.splitlines())


def test_a_misspelt_direction_is_one_line(tmp_path):
    done = run(atoll_cmd("search", "--run-dir", str(tmp_path / "run"), "--set",
                         "objective.direction=maximise"), env=ENV)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "atoll: error: objective.direction: expected one of 'minimize', 'maximize', got "
        "'maximise'; "
        "did you mean 'maximize'?"]
    assert not (tmp_path / "run").exists()
