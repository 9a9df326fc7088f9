"""Command objective cost (Atoll only): the time per evaluation of starting a script, against the
same search with a Python objective.

Runs in a process of its own (``python command_costs.py OUT.json``, started by :func:`run`), in
Atoll's venv, as a world of one rank (no mpirun). Three searches of the 2-d sphere with
``search.evaluations`` = EVALUATIONS, recording on, run one after the other REPEATS times:

- ``python objective``: benchmarks/objectives.py's ``sleep_objective`` with no sleep;
- ``python script``: ``[objective] command = ["{python}", "-c", ...]``, a script that prints
  ``ATOLL result=<x0^2 + x1^2>`` (Python's own start included: what any Python script costs);
- ``shell echo``: ``["/bin/sh", "-c", "echo ATOLL result=..."]``, a process that costs almost
  nothing to start, so the row shows Atoll's own part (a child process, its log file, reading
  its line).

Time per evaluation: ``JobSummary.wall_seconds`` / evaluations (the search loop, without the
job's setup), best of REPEATS.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import ATOLL_PYTHON, Row, mpi_env

EVALUATIONS = 40
REPEATS = 3
SCRIPT = "print('ATOLL result=' + repr({x0} ** 2 + {x1} ** 2))"
OBJECTIVES: dict[str, dict[str, Any]] = {
    "python objective": {"name": "objectives:sleep_objective", "options": {"sleep": 0.0}},
    "python script": {"command": ["{python}", "-c", SCRIPT]},
    "shell echo": {"command": ["/bin/sh", "-c", "echo ATOLL result={x0}"]},
}


def per_evaluation(objective: dict[str, Any], run_dir: Path) -> float:
    from atoll.api import search
    from atoll.config import parse_config

    config = parse_config({
        "seed": 1, "objective": objective,
        "space": {name: {"type": "float", "low": -5.0, "high": 5.0} for name in ("x0", "x1")},
        "search": {"evaluations": EVALUATIONS}})
    summary = search(config, run_dir)
    if summary.evaluations != EVALUATIONS:
        raise RuntimeError(f"{summary.evaluations} of {EVALUATIONS} evaluations ran")
    return summary.wall_seconds / summary.evaluations


def measure() -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in OBJECTIVES}
    with tempfile.TemporaryDirectory(prefix="bench-command-", dir=Path.cwd()) as tmp:
        for repeat in range(REPEATS):  # interleaved: a busy moment hits every kind alike
            for n, (name, objective) in enumerate(OBJECTIVES.items()):
                out[name].append(per_evaluation(objective, Path(tmp, f"r{repeat}-{n}")))
    return out


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        out_file = Path(tmp) / "command_costs.json"
        subprocess.run([str(ATOLL_PYTHON), __file__, str(out_file)], check=True,
                       env=mpi_env(), cwd=tmp)
        got = json.loads(out_file.read_text())
    for name, times in got.items():
        log(f"  command costs, {name}: {[round(t * 1e3, 2) for t in times]} ms per evaluation")
    best = {name: min(times) for name, times in got.items()}
    python = best["python objective"]
    rows = [Row(f"time per evaluation of a command objective, {name} (a world of 1 rank, "
                f"{EVALUATIONS} evaluations, best of {REPEATS}); other: the same search with a "
                "Python objective", f"{best[name] * 1e3:.1f} ms", f"{python * 1e3:.2f} ms",
                f"{best[name] / python:.0f}")
            for name in ("python script", "shell echo")]
    notes = [f"command objective: {best['python script'] * 1e3:.1f} ms per evaluation with a "
             f"Python script, {best['shell echo'] * 1e3:.1f} ms with /bin/sh echo, "
             f"{python * 1e3:.2f} ms with a Python objective"]
    return rows, notes


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(measure()))
