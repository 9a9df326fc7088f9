"""SIGTERM and SIGINT (Ctrl-C) to ``mpirun`` itself: what Open MPI 5's launcher does, as the
README documents it, and that a resume then reaches the budget. SIGUSR1 to mpirun (forwarded,
exit 75) is tested in test_stopping.py."""

from __future__ import annotations

import math
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


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_or_sigint_to_mpirun_exits_1_and_resume_reaches_the_budget(tmp_path, sig):
    """prterun (Open MPI 5.0) answers SIGTERM/SIGINT/SIGHUP by ending the job: SIGTERM to every
    rank, SIGKILL 0.25 s later, its own output quiet and exit code 1 whatever the ranks return.
    Ranks that finish within the grace record 75; otherwise the job is recorded as killed."""
    run_dir = tmp_path / "run"
    budget = 2 * 150
    proc = subprocess.Popen(
        mpirun_cmd(2, "-m", "atoll", "search", "--config", CONFIG, "--run-dir", str(run_dir),
                   "-q", "--set", "search.generations=150"),
        cwd=ROOT, env=mpi_env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(run_dir.glob("workers/*.h5")):
        time.sleep(0.1)
    time.sleep(1.0)  # inside the search
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
