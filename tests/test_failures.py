"""Failing evaluations are data: the run completes its budget and never breeds from them."""

from __future__ import annotations

import socket
import subprocess
import time

import numpy as np
import pytest

from atoll.individual import Status
from atoll.record import open_run
from conftest import ROOT, kill_tree, mpi_env, mpirun_atoll, mpirun_cmd


@pytest.mark.parametrize("way,k,expected", [
    ("raise", 1, "ValueError: flaky objective failed on purpose"),
    ("returns_nan", 1, "non-finite loss (nan)"),
    ("returns_inf", 1, "non-finite loss (inf)"),
    ("returns_text", 1, "objective returned str, not a number"),
    ("returns_huge", 1, "OverflowError: objective returned an unusable value (int too large "
                        "to convert to float)"),
    ("exits", 1, "SystemExit: 2"),
    ("interrupts", 1, "KeyboardInterrupt"),
    ("runaway", 1, "EvaluationTimeout: evaluation exceeded search.eval_timeout = 0.5 s"),
    ("raise", 2, "ValueError: flaky objective failed on purpose"),
    pytest.param("one_rank_raises", 2, "rank 1: RuntimeError: only the last rank failed",
                 marks=pytest.mark.slow),  # waits out distributed.timeout on 2-rank workers
])
def test_twenty_percent_failures_the_run_completes_its_budget(tmp_path, way, k, expected):
    run_dir = tmp_path / "run"
    done = mpirun_atoll(
        4, "search", "--config", "tests/configs/slow_sphere.toml", "--run-dir", str(run_dir),
        "--set", "objective.name=objectives:flaky", "--set", f"objective.options.way={way}",
        "--set", "objective.options.rate=0.2", "--set", "search.generations=20",
        "--set", f"search.ranks_per_worker={k}",
        "--set", f"search.eval_timeout={0.5 if way == 'runaway' else 0}",
        "--set", "distributed.timeout=3", "--set", "distributed.backend=gloo", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ind = open_run(run_dir).individuals
    assert len(ind) == 20 * 4 // k
    failed = ind[ind["status"] == int(Status.FAILED)]
    assert 0.05 * len(ind) <= len(failed) <= 0.5 * len(ind)
    assert all(expected in e for e in failed["error"]), set(failed["error"])
    assert np.isnan(failed["loss"]).all()
    ok = ind[ind["status"] == int(Status.OK)]
    assert np.isfinite(ok["loss"]).all()
    # A failed individual is never a parent.
    parents = set(ind["parent_a"]) | set(ind["parent_b"])
    assert not parents & set(failed["id"])


def test_each_rank_logs_to_its_own_file_with_rank_host_and_worker(tmp_path):
    run_dir = tmp_path / "run"
    done = mpirun_atoll(
        2, "search", "--config", "tests/configs/slow_sphere.toml", "--run-dir", str(run_dir),
        "--set", "objective.name=objectives:flaky", "--set", "objective.options.way=raise",
        "--set", "objective.options.rate=0.5", "--set", "search.generations=10", "-q")
    assert done.returncode == 0, done.stderr[-3000:]
    logs = sorted((run_dir / "logs").iterdir())
    assert [p.name for p in logs] == ["job000-rank00000.log", "job000-rank00001.log"]
    host = socket.gethostname()
    failed = open_run(run_dir).individuals
    failed = failed[failed["status"] == int(Status.FAILED)]
    for rank, path in enumerate(logs):
        text = path.read_text()
        lines = [line for line in text.splitlines() if " rank " in line[:40]]
        assert lines and all(f" rank {rank} host {host} worker {rank} " in line
                             for line in lines)
        mine = failed[failed["worker"] == rank]
        # every failure of this rank's worker, with its traceback, in this rank's file only
        assert text.count("WARNING atoll.evaluation.call: individual ") == len(mine)
        assert text.count("Traceback (most recent call last)") == len(mine)
    assert len(failed) > 0
    # The console gets one line per failure; the tracebacks are in the files above.
    assert "Traceback" not in done.stderr
    assert done.stderr.count("(traceback in the rank's log file)") == len(failed)


def test_a_multi_rank_workers_failure_is_one_console_line(tmp_path):
    """Both ranks of the worker fail alike: the leader warns on the console, the follower's
    line is in its own log only (before, the console had every failure twice)."""
    run_dir = tmp_path / "run"
    done = mpirun_atoll(
        2, "search", "--config", "tests/configs/slow_sphere.toml", "--run-dir", str(run_dir),
        "--set", "objective.name=objectives:flaky", "--set", "objective.options.way=raise",
        "--set", "objective.options.rate=0.5", "--set", "search.generations=10",
        "--set", "search.ranks_per_worker=2", "-q")
    assert done.returncode == 0, done.stderr[-3000:]
    individuals = open_run(run_dir).individuals
    failed = int(np.count_nonzero(individuals["status"] == int(Status.FAILED)))
    assert failed > 0
    assert done.stderr.count("(traceback in the rank's log file)") == failed
    follower = (run_dir / "logs" / "job000-rank00001.log").read_text()
    assert follower.count("INFO atoll.evaluation.call: individual ") == failed


TYPO = """
def objective(params, ctx):
    return params["{key}"] ** 2
"""


def test_an_objective_that_always_fails_gives_up_and_the_fixed_one_continues_the_run(tmp_path):
    """A typo fails every evaluation: the job stops after search.give_up_after failures with
    exit 70 and the commonest error, instead of spending the budget; the fixed objective then
    continues the same run (its failures count in the budget, nothing is deleted)."""
    (tmp_path / "typo.py").write_text(TYPO.format(key="hiden"))
    config = tmp_path / "typo.toml"
    config.write_text('[objective]\nname = "typo:objective"\n'
                      '[space.hidden]\ntype = "float"\nlow = -1.0\nhigh = 1.0\n')
    run_dir = tmp_path / "run"
    broken = mpirun_atoll(2, "search", "--config", str(config), "--run-dir", str(run_dir),
                          "--set", "search.generations=20", "--set", "search.give_up_after=6",
                          "-q")
    assert broken.returncode == 70, broken.stderr[-3000:]
    assert "commonest error" in broken.stderr and "KeyError: 'hiden'" in broken.stderr
    assert f"atoll resume {run_dir}" in broken.stderr
    first = open_run(run_dir).individuals
    assert 6 <= len(first) < 40 and (first["status"] == int(Status.FAILED)).all()
    (tmp_path / "typo.py").write_text(TYPO.format(key="hidden"))
    fixed = mpirun_atoll(2, "resume", str(run_dir), "-q")
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    ind = open_run(run_dir).individuals
    assert len(ind) == 40 and set(first["id"].tolist()) <= set(ind["id"].tolist())
    assert (ind["status"] == int(Status.OK)).sum() == 40 - len(first)


def test_failures_after_a_success_never_give_up(tmp_path):
    run_dir = tmp_path / "run"
    done = mpirun_atoll(
        1, "search", "--config", "tests/configs/slow_sphere.toml", "--run-dir", str(run_dir),
        "--set", "objective.name=objectives:flaky", "--set", "objective.options.way=raise",
        "--set", "objective.options.rate=0.9", "--set", "search.generations=40",
        "--set", "search.give_up_after=2", "--set", "seed=3", "-q")
    ind = open_run(run_dir).individuals
    statuses = ind["status"].tolist()
    first_ok = statuses.index(int(Status.OK)) if int(Status.OK) in statuses else len(ind)
    if first_ok >= 2:  # two failures came first: it gave up, as it should
        assert done.returncode == 70 and len(ind) == 2
    else:
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(ind) == 40 and statuses.count(int(Status.FAILED)) > 2


def test_a_search_that_fails_on_one_rank_ends_the_job_at_once(tmp_path):
    """A worker file deleted under a running search: that leader cannot write its record, and
    the job used to hang (its partner waited for it in the final drain, under srun until the
    time limit). Now the failing rank names itself and the cause, and ends every rank."""
    run_dir = tmp_path / "run"
    cmd = mpirun_cmd(2, "-m", "atoll", "search", "--config", "tests/configs/slow_sphere.toml",
                     "--run-dir", str(run_dir), "--set", "search.generations=2000",
                     "--set", "record.flush_interval=5", "-q")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=mpi_env(), start_new_session=True)
    victim = run_dir / "workers" / "job000-worker00001.h5"
    try:
        deadline = time.monotonic() + 60
        while not victim.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # its writer has opened it; the first flush comes at 5 s
        victim.unlink()  # that flush adds the metric column 'half': it reopens the file
        _, err = proc.communicate(timeout=60)
    except (subprocess.TimeoutExpired, FileNotFoundError):
        kill_tree(proc)
        _, err = proc.communicate()
        pytest.fail(f"the job did not end by itself:\n{err[-3000:]}")
    assert proc.returncode != 0, err[-3000:]
    lines = [line for line in err.splitlines() if "ends the job" in line]
    assert len(lines) == 1, err[-3000:]
    assert "rank 1 ends the job: its search failed" in lines[0]
    assert f"then 'atoll resume {run_dir}'" in lines[0] and "job000-worker00001.h5" in lines[0]
    assert "Traceback" not in err and "Traceback" in (
        run_dir / "logs" / "job000-rank00001.log").read_text()
