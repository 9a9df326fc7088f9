"""benchmarks/search_cache.py: make bench-full's kept results, reused only for the same code."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from conftest import ROOT

sys.path.append(str(ROOT / "benchmarks"))  # after tests/: its objectives.py is not the tests'

from search_cache import RAY_TRAINING, SearchCache, code_fingerprint  # noqa: E402

TASK = {"seed": 3, "function": "schwefel", "evaluations": 50, "run_dir": "/tmp/a"}


def test_a_kept_result_comes_back_for_the_same_task_in_any_directory(tmp_path):
    cache = SearchCache(tmp_path / "cache")
    assert cache.get("atoll", TASK) is None
    cache.put("atoll", TASK, {"best": 1.5, "evaluations": 50})
    again = SearchCache(tmp_path / "cache")  # a later run
    assert again.get("atoll", {**TASK, "run_dir": "/tmp/b"}) == {"best": 1.5, "evaluations": 50}
    assert again.get("atoll", {**TASK, "seed": 4}) is None
    assert again.get("optuna", TASK) is None
    assert "1 taken from earlier runs" in again.summary()
    assert again.summary().startswith("0 searches measured in this run")


def test_each_side_keeps_its_results_in_a_file_of_its_own(tmp_path):
    """The peers' files are what the repository keeps; Atoll's stays out of it."""
    cache = SearchCache(tmp_path)
    cache.put("optuna", TASK, {"best": 2.0, "evaluations": 50})
    cache.put("atoll", TASK, {"best": 1.0, "evaluations": 50})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["atoll.jsonl", "optuna.jsonl"]
    (line,) = (tmp_path / "optuna.jsonl").read_text().splitlines()
    entry = json.loads(line)
    assert entry["side"] == "optuna" and entry["result"]["best"] == 2.0
    assert "run_dir" not in entry["task"] and entry["task"]["seed"] == 3
    assert SearchCache(tmp_path).get("optuna", TASK) == {"best": 2.0, "evaluations": 50}


def test_a_write_cut_short_is_no_result_and_spoils_no_later_one(tmp_path):
    cache = SearchCache(tmp_path)
    cache.put("atoll", TASK, {"best": 1.0, "evaluations": 50})
    path = tmp_path / "atoll.jsonl"
    with open(path, "a") as f:  # killed while writing the next entry
        f.write('{"key": "x", "measured": "x", "res')
    later = {**TASK, "seed": 5}
    SearchCache(tmp_path).put("atoll", later, {"best": 0.5, "evaluations": 50})
    again = SearchCache(tmp_path)
    assert again.get("atoll", TASK) == {"best": 1.0, "evaluations": 50}
    assert again.get("atoll", later) == {"best": 0.5, "evaluations": 50}
    assert len(path.read_text().splitlines()) == 3


def copied_tree(tmp_path: Path) -> Path:
    """A copy of the package and the benchmarks' scripts, to edit without touching the repo."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "app" / "atoll", tree / "app" / "atoll",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "benchmarks", tree / "benchmarks",
                    ignore=shutil.ignore_patterns(".venv*", ".cache", "searches", "__pycache__"))
    return tree


def test_changed_code_or_side_script_means_a_new_search(tmp_path):
    tree = copied_tree(tmp_path)
    before = {side: code_fingerprint(side, tree) for side in ("atoll", "optuna")}
    assert before == {side: code_fingerprint(side, tree) for side in ("atoll", "optuna")}
    with open(tree / "app" / "atoll" / "individual.py", "a") as f:
        f.write("\n# changed\n")
    assert code_fingerprint("atoll", tree) != before["atoll"]
    assert code_fingerprint("optuna", tree) == before["optuna"]  # Atoll's code is not Optuna's
    with open(tree / "benchmarks" / "optuna_side.py", "a") as f:
        f.write("\n# changed\n")
    assert code_fingerprint("optuna", tree) != before["optuna"]


def test_ray_training_results_follow_the_code_its_trials_train(tmp_path):
    """Ray's training side has no mpirun script of its own: its results change with Ray's
    scripts and the classifier's modules, not with the rest of Atoll."""
    tree = copied_tree(tmp_path)
    before = code_fingerprint(RAY_TRAINING, tree)
    with open(tree / "app" / "atoll" / "individual.py", "a") as f:
        f.write("\n# changed\n")
    assert code_fingerprint(RAY_TRAINING, tree) == before
    for changed in ("app/atoll/objectives/classifier.py", "benchmarks/spirals.py",
                    "benchmarks/ray_training_member.py"):
        with open(tree / changed, "a") as f:
            f.write("\n# changed\n")
        after = code_fingerprint(RAY_TRAINING, tree)
        assert after != before, changed
        before = after
    cache = SearchCache(tmp_path / "searches")
    cache.put(RAY_TRAINING, TASK, {"reports": [], "trials": [], "errors": [], "seconds": 1.0})
    assert [p.name for p in (tmp_path / "searches").iterdir()] == ["ray-training.jsonl"]
