"""SIGTERM and SIGINT (Ctrl-C) to ``mpirun`` itself: what Open MPI 5's launcher does, as the
README documents it, and that a resume then reaches the budget. SIGUSR1 to mpirun (forwarded,
exit 75) is tested in test_stopping.py, repeated SIGUSR1s here."""

from __future__ import annotations

import math
import random
import signal
import subprocess
import time

import numpy as np
import pytest

from atoll.engine.restore import completed_count
from atoll.exit_codes import EXIT_STOPPED
from atoll.record import open_run
from conftest import ROOT, atoll_cmd, mpi_env, mpirun_atoll, mpirun_cmd, run

CONFIG = "tests/configs/slow_sphere.toml"


def searching(run_dir) -> subprocess.Popen[str]:
    """``mpirun -n 2 atoll search`` of 300 slow evaluations, returned once it is well inside
    the search."""
    proc = subprocess.Popen(
        mpirun_cmd(2, "-m", "atoll", "search", "--config", CONFIG, "--run-dir", str(run_dir),
                   "-q", "--set", "search.generations=150"),
        cwd=ROOT, env=mpi_env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(run_dir.glob("workers/*.h5")):
        time.sleep(0.1)
    time.sleep(1.0)
    return proc


@pytest.mark.parametrize("gaps", [
    pytest.param([0.1], id="two-100ms-apart"),
    pytest.param([0.05] * 9, id="ten-50ms-apart"),
    pytest.param(None, id="stream-1-10ms-apart"),  # until mpirun has exited
])
def test_repeated_sigusr1_to_mpirun_is_one_stop_exit_75(tmp_path, gaps):
    """SLURM and users repeat signals; a second one used to reach a rank after its job had
    stopped, while the interpreter shut down (its handlers reset to the default), and killed
    it: exit 138. Every signal after the first is absorbed until the job has saved."""
    run_dir = tmp_path / "run"
    proc = searching(run_dir)
    rng = random.Random(0)
    proc.send_signal(signal.SIGUSR1)
    sent = 1
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline and \
            (gaps is None or sent <= len(gaps)):
        time.sleep(gaps[sent - 1] if gaps is not None else rng.uniform(0.001, 0.01))
        if proc.poll() is None:
            proc.send_signal(signal.SIGUSR1)
            sent += 1
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_STOPPED, f"{sent} signals sent\n{err[-2000:]}"
    assert sent > 1
    run_ = open_run(run_dir)
    assert int(run_.jobs["exit_code"][0]) == EXIT_STOPPED
    ind = run_.individuals
    assert 0 < completed_count(ind) < 300 and len(np.unique(ind["id"])) == len(ind)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_or_sigint_to_mpirun_exits_1_and_resume_reaches_the_budget(tmp_path, sig):
    """prterun (Open MPI 5.0) answers SIGTERM/SIGINT/SIGHUP by ending the job: SIGTERM to every
    rank, SIGKILL 0.25 s later, its own output quiet and exit code 1 whatever the ranks return.
    Ranks that finish within the grace record 75; otherwise the job is recorded as killed."""
    run_dir = tmp_path / "run"
    budget = 2 * 150
    proc = searching(run_dir)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err[-2000:]
    assert "atoll resume" not in out + err  # the ranks' hint does not reach the terminal
    jobs = open_run(run_dir).jobs
    stop = float(jobs["stop"][0])
    assert (math.isfinite(stop) and int(jobs["exit_code"][0]) == EXIT_STOPPED) or \
        not math.isfinite(stop)  # stopped cleanly in time, or killed: never "done"
    shown = run(atoll_cmd("inspect", str(run_dir)))  # where users read how the job ended
    assert shown.returncode == 0, shown.stderr
    assert ("exit 75" if math.isfinite(stop) else "running or killed") in shown.stdout
    done = mpirun_atoll(2, "resume", str(run_dir), "-q")
    assert done.returncode == 0, done.stderr[-2000:]
    ind = open_run(run_dir).individuals
    assert completed_count(ind) == budget
    assert len(np.unique(ind["id"])) == len(ind)
