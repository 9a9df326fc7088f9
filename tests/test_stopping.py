"""Signals and time limits: every rank stops, saves, exits 75, and a resume finishes the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from atoll.engine.restore import completed_count
from atoll.engine.stopping import PROBE_INTERVAL
from atoll.individual import Status
from atoll.record import open_run
from conftest import ROOT, atoll_cmd, mpi_env, mpirun_atoll, mpirun_cmd, rank_pids, run

CONFIG = "tests/configs/slow_sphere.toml"


def started(run_dir: Path, ranks: int, *settings: str) -> subprocess.Popen[str]:
    args = ["-m", "atoll", "search", "--config", CONFIG, "--run-dir", str(run_dir)]
    for item in settings:
        args += ["--set", item]
    proc = subprocess.Popen(mpirun_cmd(ranks, *args), cwd=ROOT, env=mpi_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(run_dir.glob("workers/*.h5")):
        time.sleep(0.1)
    time.sleep(1.0)  # well inside the search
    return proc


@pytest.mark.parametrize("sig,which,k", [
    (signal.SIGUSR1, -1, 2),  # a follower rank of a 2-rank worker
    (signal.SIGTERM, 0, 1),   # the first leader
    (signal.SIGUSR1, 2, 1),   # another leader
])
def test_signal_on_one_rank_stops_every_rank_with_75_and_resume_finishes(tmp_path, sig, which, k):
    run_dir = tmp_path / "run"
    budget = 4 // k * 150
    proc = started(run_dir, 4, "search.generations=150", f"search.ranks_per_worker={k}",
                   "search.islands=2")
    ranks = rank_pids(proc.pid)
    assert sorted(ranks) == [0, 1, 2, 3], ranks
    os.kill(ranks[which % 4], sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err[-2000:]
    run = open_run(run_dir)
    ind = run.individuals
    assert 0 < completed_count(ind) < budget
    assert int(run.jobs["exit_code"][0]) == 75
    interrupted = ind[ind["status"] == int(Status.INTERRUPTED)]
    assert len(interrupted) <= 4 // k  # at most the evaluations in flight
    done = mpirun_atoll(4, "resume", str(run_dir))
    assert done.returncode == 0, done.stderr[-2000:]
    ind = open_run(run_dir).individuals
    assert completed_count(ind) == budget
    assert len(np.unique(ind["id"])) == len(ind)


def test_sigusr1_to_mpirun_reaches_the_ranks(tmp_path):
    run_dir = tmp_path / "run"
    proc = started(run_dir, 4, "search.generations=150")
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err[-2000:]
    assert 0 < completed_count(open_run(run_dir).individuals) < 600


def test_stop_flag_probes_at_most_every_interval_sees_a_notice_and_keeps_an_agreed_stop(tmp_path):
    """An idle probe makes Open MPI yield the core when ranks outnumber cores, so the flag
    probes for other ranks' notices at most every PROBE_INTERVAL, however often it is asked.
    A stop agreed within a worker holds on each of its ranks from then on, before the notice."""
    out = tmp_path / "facts.json"
    done = run(mpirun_cmd(2, str(ROOT / "tests" / "mpi_programs" / "stop_checks.py"), str(out)),
               timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in json.loads(out.read_text()):
        assert not rank["early"]
        assert 1 <= rank["probes"] <= rank["elapsed"] / PROBE_INTERVAL + 1, rank
        assert rank["seen"] and rank["stopped"]
        assert rank["kept_after_agreeing"] == 50  # every round, on both ranks


def catches(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (its SigCgt mask in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


@pytest.mark.parametrize("delay", [0.0, 0.15, 0.4])
def test_a_signal_right_after_launch_is_a_stop_not_a_crash(tmp_path, delay):
    """SLURM may signal a job step at any moment, also while the command line is imported,
    the config read and MPI started. Delays count from the moment the process catches the
    signal: before it, in the interpreter's own start, no program can (on a loaded machine
    that took over 0.3 s once)."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        atoll_cmd("search", "--config", "tests/configs/slow_sphere.toml", "--run-dir",
                  str(run_dir), "-q", "--set", "search.generations=500"),
        cwd=ROOT, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not catches(proc.pid, signal.SIGUSR1) and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(delay)
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err[-2000:]
    assert "Traceback" not in err and "Stopped before the budget was spent" in out


def _ignore_sighup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def _default_sighup() -> None:
    """As a shell started from a terminal leaves it (the suite itself may run under nohup)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.mark.parametrize("nohup", [False, True])
def test_sighup_stops_a_job_unless_it_was_started_under_nohup(tmp_path, nohup):
    """A closed terminal sends SIGHUP: a clean stop (75), not a rank killed mid-write; under
    nohup (SIGHUP ignored from the start) the job goes on."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        atoll_cmd("search", "--config", CONFIG, "--run-dir", str(run_dir), "-q", "--set",
                  "search.generations=5000"), cwd=ROOT, env=mpi_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=_ignore_sighup if nohup else _default_sighup)
    deadline = time.monotonic() + 60
    while not list(run_dir.glob("workers/*.h5")) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # well inside the search
    proc.send_signal(signal.SIGHUP)
    if nohup:
        time.sleep(1.5)
        assert proc.poll() is None
        proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err[-2000:]
    assert ("job stopped early (SIGHUP)" in err) is not nohup, err
    assert ("job stopped early (SIGUSR1)" in err) is nohup, err
    assert 0 < completed_count(open_run(run_dir).individuals) < 5000


CATCH_BEFORE_CLICK = """
import signal, sys
caught = {}
class Watch:  # notes whether SIGUSR1 is caught when click is first imported
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "click" and name not in caught:
            caught[name] = signal.getsignal(signal.SIGUSR1) is not signal.SIG_DFL
sys.meta_path.insert(0, Watch)
sys.argv = ["atoll", *sys.argv[1:]]
from atoll.__main__ import main
try:
    main()
except SystemExit:
    pass
print(caught)
"""


@pytest.mark.parametrize("command, caught", [("search", True), ("resume", True),
                                             ("inspect", False)])
def test_a_job_catches_stop_signals_before_the_command_line_is_imported(command, caught):
    """The ``atoll`` command's entry point (pyproject's script) catches them first, so a signal
    while click and the rest are imported is a stop; other commands keep the defaults."""
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["atoll"] == "atoll.__main__:main"
    done = subprocess.run([sys.executable, "-c", CATCH_BEFORE_CLICK, command, "--no-such"],
                          cwd=ROOT, env=mpi_env(), capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == repr({"click": caught}), done.stderr


LAST_EPOCH_OBJECTIVE = """
import time
from pathlib import Path

from mpi4py import MPI


def f(params, ctx):
    '''3 epochs. World rank 0 spends the last epoch of its first evaluation, rank 1 the first
    epoch of its own, waiting for the stop (a file marks each); the value is the epochs trained.'''
    if ctx.options["declare"]:
        ctx.last_epoch = 2
    rank = MPI.COMM_WORLD.Get_rank()
    trained = 0
    for epoch in range(3):
        waits = (rank, epoch) in {(0, 2), (1, 0)}
        if waits:
            (Path(ctx.options["marks"]) / f"rank{rank}").touch()
        time.sleep(3.0 if waits else 0.05)
        trained += 1
        if ctx.report(epoch, val_loss=float(trained)):
            break
    return float(trained)
"""


@pytest.mark.parametrize("declare", [True, False])
def test_a_stop_met_at_the_last_epoch_leaves_the_evaluation_finished(tmp_path, declare):
    """SIGUSR1 to mpirun while one worker trains the last epoch of an evaluation and the other
    its first: the first evaluation's value was computed, so it is ok (when the objective set
    ctx.last_epoch; it used to be interrupted and redone); the second is interrupted."""
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "last_epoch.py").write_text(LAST_EPOCH_OBJECTIVE)
    config = tmp_path / "search.toml"
    config.write_text(f'[objective]\nname = "last_epoch:f"\n[objective.options]\n'
                      f'declare = {str(declare).lower()}\nmarks = "{marks}"\n'
                      '[space.x]\ntype = "float"\nlow = 0.0\nhigh = 1.0\n'
                      "[search]\ngenerations = 5\nislands = 1\n")
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(mpirun_cmd(2, "-m", "atoll", "search", "--config", str(config),
                                       "--run-dir", str(run_dir), "-q"),
                            cwd=ROOT, env=mpi_env(), text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while len(list(marks.iterdir())) < 2 and time.monotonic() < deadline \
            and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err[-2000:]
    ind = open_run(run_dir).individuals
    finished, cut = (ind[ind["worker"] == worker] for worker in (0, 1))
    assert len(finished) == 1 and len(cut) == 1, ind
    assert cut["status"][0] == int(Status.INTERRUPTED)
    if declare:
        assert finished["status"][0] == int(Status.OK) and finished["loss"][0] == 3.0
        assert completed_count(ind) == 1
    else:
        assert finished["status"][0] == int(Status.INTERRUPTED) and completed_count(ind) == 0
