"""Command objectives (``[objective] command``): real scripts as child processes of real
mpirun ranks, results read from their ``ATOLL`` lines, failures and pruning recorded."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from atoll.config import config_to_dict, parse_config
from atoll.engine.topology import NodePlace
from atoll.errors import ConfigError
from atoll.exit_codes import EXIT_BAD_INPUT
from atoll.individual import Status
from atoll.objectives.child import _started
from atoll.objectives.launch_env import (
    SLURM_TASK_VARIABLES,
    gpu_share,
    slurm_step_variables,
    starts_torchrun,
    worker_gpus,
)
from atoll.objectives.lines import BadLine, Lines, ResultsFile
from atoll.objectives.supervisor import END
from atoll.record import RunPaths, open_run, read_history
from atoll.report_line import report, result
from conftest import (
    BIN,
    ROOT,
    alive,
    atoll_cmd,
    descendants,
    mpi_env,
    mpirun_atoll,
    mpirun_cmd,
    run,
)
from test_slurm import job_env, slurm_run

COMMANDS = ROOT / "tests" / "commands"

PLAIN = f"""seed = 3
[objective]
command = ["{{python}}", "{COMMANDS}/train_plain.py", "--lr", "{{lr}}", "--layers", "{{layers}}",
           "--out", "{{work_dir}}"]
env = {{ GREETING = "hello-{{id}}" }}
[space.lr]
type = "float"
low = 0.0
high = 1.0
[space.layers]
type = "int"
low = 1
high = 4
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "atoll.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("by_metric", [False, True])
def test_a_plain_script_reads_its_options_and_reports_epochs_and_its_result(tmp_path, by_metric):
    """Its value is its result line, or with ``result_metric`` its last value of a metric."""
    config = PLAIN.replace('"{work_dir}"]', '"{work_dir}", "--no-result"]\nresult_metric = '
                           '"val_loss"') if by_metric else PLAIN
    run_dir = tmp_path / "run"
    done = mpirun_atoll(1, "search", "--config", str(write(tmp_path, config)), "--run-dir",
                        str(run_dir), "--set", "search.evaluations=3", "-q", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    run, paths = open_run(run_dir), RunPaths(run_dir)
    ind = run.individuals
    assert len(ind) == 3 and (ind["status"] == int(Status.OK)).all(), ind["error"]
    for row in ind:
        ident = int(row["id"])
        lr, layers = float(row["lr"]), int(row["layers"])
        assert row["loss"] == pytest.approx((lr - 0.3) ** 2 + layers + (not by_metric))
        seen = paths.work_dir(ident).joinpath("seen.txt").read_text().split()
        assert seen == [repr(lr), str(layers), "0", "1", "127.0.0.1", f"hello-{ident}"]
        curve = run.epochs[run.epochs["individual"] == ident]
        assert curve["epoch"].tolist() == [0, 1, 2]
        assert curve["val_loss"].tolist() == \
            pytest.approx([(lr - 0.3) ** 2 + layers + 2 - e for e in range(3)])
        assert "training epoch 2" in paths.command_log(ident, 0).read_text()


def test_a_command_run_resumes_from_its_record(tmp_path):
    """The command, its environment and its directory come back from run.h5."""
    run_dir = tmp_path / "run"
    first = mpirun_atoll(1, "search", "--config", str(write(tmp_path, PLAIN)), "--run-dir",
                         str(run_dir), "--set", "search.evaluations=1", "-q", timeout=120)
    assert first.returncode == 0, first.stderr[-3000:]
    (tmp_path / "atoll.toml").unlink()
    again = mpirun_atoll(1, "resume", str(run_dir), "--set", "search.evaluations=2", "-q",
                         timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    ind = open_run(run_dir).individuals
    assert len(ind) == 2 and (ind["status"] == int(Status.OK)).all(), ind["error"]
    seen = RunPaths(run_dir).work_dir(1).joinpath("seen.txt").read_text().split()
    assert seen[-1] == "hello-1"


@pytest.mark.parametrize(("mode", "expected"), [
    ("--crash", "the command exited with code 1; its stderr ended with: starting --crash | "
                "Traceback"),
    ("--hang", "the command ran past search.eval_timeout = 1 s and was killed; its stderr "
               "ended with: starting --hang"),
    ("--silent", "the command ended without a result: print 'ATOLL result=<number>'"),
])
def test_a_failing_command_is_a_failed_individual_with_its_stderr(tmp_path, mode, expected):
    config = PLAIN.replace(f'"{COMMANDS}/train_plain.py"', f'"{COMMANDS}/broken.py", "{mode}"')
    run_dir = tmp_path / "run"
    done = mpirun_atoll(1, "search", "--config", str(write(tmp_path, config)), "--run-dir",
                        str(run_dir), "--set", "search.evaluations=2",
                        "--set", "search.eval_timeout=1", "-q", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    ind = open_run(run_dir).individuals
    assert len(ind) == 2 and (ind["status"] == int(Status.FAILED)).all()
    assert all(expected in str(e) for e in ind["error"]), ind["error"]
    if mode == "--crash":
        assert "RuntimeError: the model diverged" in str(ind["error"][0])
    log = RunPaths(run_dir).command_log(int(ind["id"][0]), 0).read_text()
    assert f"starting {mode}" in log


X_SPACE = '[space.x]\ntype = "float"\nlow = 0.0\nhigh = 1.0\n'
"""One float x in [0, 1]: the space of most searches here."""


DDP = f"""seed = 5
[objective]
command = ["{{python}}", "{COMMANDS}/ddp_train.py", "--x", "{{x}}", "--trace", "{{work_dir}}"]
{X_SPACE}[evolution]
random_init = 0.5
[pruning]
rule = "median"
warmup_epochs = 1
min_completed = 2
[distributed]
timeout = 20
"""


def two_rank_search(tmp_path: Path, config: str, ranks: int, evaluations: int,
                    timeout: float) -> tuple[Any, RunPaths]:
    """A finished search of ``config`` on workers of 2 ranks: (its record, its paths)."""
    run_dir = tmp_path / "run"
    done = mpirun_atoll(ranks, "search", "--config", str(write(tmp_path, config)), "--run-dir",
                        str(run_dir), "--set", "search.ranks_per_worker=2",
                        "--set", f"search.evaluations={evaluations}", "-q", timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return open_run(run_dir), RunPaths(run_dir)


@pytest.mark.slow
def test_a_torchrun_style_ddp_script_on_two_rank_workers_is_pruned(tmp_path):
    run, paths = two_rank_search(tmp_path, DDP, ranks=4, evaluations=6, timeout=300)
    ind = run.individuals
    assert len(ind) == 6, ind["error"]
    ok, pruned = ind[ind["status"] == int(Status.OK)], ind[ind["status"] == int(Status.PRUNED)]
    assert len(ok) + len(pruned) == 6 and len(pruned) >= 1, ind["error"]

    def trace(ident: int, rank: int) -> list[int]:
        text = paths.work_dir(ident).joinpath(f"rank{rank}.txt").read_text()
        return [int(e) for e in text.split()]

    for row in ok:
        assert row["loss"] == row["x"]
        assert trace(int(row["id"]), 0) == trace(int(row["id"]), 1) == [0, 1, 2, 3]
    for row in pruned:
        ident = int(row["id"])
        stopped = int(str(row["error"]).rsplit(" ", 1)[1])
        assert 1 <= stopped < 3
        assert row["loss"] == pytest.approx(row["x"] + 0.1 * (4 - stopped))  # its last val_loss
        assert max(trace(ident, 0)) < 3 and max(trace(ident, 1)) < 3  # the script was ended
        curve = run.epochs[run.epochs["individual"] == ident]
        assert int(curve["epoch"].max()) == stopped
    for rank in (0, 1):
        assert paths.command_log(int(ind["id"][0]), rank).exists()


def test_a_program_that_is_not_there_stops_the_job_with_one_line(tmp_path):
    config = PLAIN.replace('"{python}"', '"no-such-python"')
    run_dir = tmp_path / "run"
    done = run(atoll_cmd("search", "--config", str(write(tmp_path, config)), "--run-dir",
                         str(run_dir), "-q"), timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith(
        "objective.command: 'no-such-python' is not an executable on PATH or in "
        f"{tmp_path}; give its path, or e.g. [\"{{python}}\", \"script.py\", ...]"), done.stderr
    assert "Traceback" not in done.stderr and not run_dir.exists()


def two_failures_on_a_two_rank_worker(tmp_path: Path, config: str, run_dir: Path) -> Any:
    """The individuals of a 2-evaluation search on one 2-rank worker, all failed."""
    done = mpirun_atoll(2, "search", "--config", str(write(tmp_path, config)), "--run-dir",
                        str(run_dir), "--set", "search.ranks_per_worker=2",
                        "--set", "search.evaluations=2", "-q", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    ind = open_run(run_dir).individuals
    assert (ind["status"] == int(Status.FAILED)).all() and len(ind) == 2
    return ind


CRASH_RANK1 = PLAIN.replace(
    f'"{COMMANDS}/train_plain.py"', f'"{COMMANDS}/broken.py", "--crash-rank1", "{{work_dir}}"'
).replace("\n[space.lr]", "\nstop_grace = 1\n[space.lr]")
"""Rank 1 fails while rank 0 waits without a result: rank 0 gets stop_grace to say one."""


def test_one_ranks_crash_fails_the_individual_and_ends_the_other_ranks_command(tmp_path):
    config = CRASH_RANK1
    run_dir = tmp_path / "run"
    ind = two_failures_on_a_two_rank_worker(tmp_path, config, run_dir)
    for row in ind:
        assert str(row["error"]) == (
            "rank 0: CommandFailed: the command of worker rank 1 failed; rank 1: CommandFailed: "
            "the command exited with code 3; its stderr ended with: starting --crash-rank1")
        waiting = int(RunPaths(run_dir).work_dir(int(row["id"])).joinpath("pid").read_text())
        assert not Path(f"/proc/{waiting}").exists()  # rank 0's command was ended


def test_one_ranks_crash_on_a_three_rank_worker_ends_every_ranks_command(tmp_path):
    """Rank 2, neither the leader nor the failed rank, leaves too, for rank 1's failure."""
    config = CRASH_RANK1
    run_dir = tmp_path / "run"
    done = mpirun_atoll(3, "search", "--config", str(write(tmp_path, config)), "--run-dir",
                        str(run_dir), "--set", "search.ranks_per_worker=3",
                        "--set", "search.evaluations=1", "-q", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    ind = open_run(run_dir).individuals
    assert ind["status"].tolist() == [int(Status.FAILED)]
    assert str(ind["error"][0]) == (  # the same error of two ranks said once
        "ranks 0, 2: CommandFailed: the command of worker rank 1 failed; rank 1: CommandFailed: "
        "the command exited with code 3; its stderr ended with: starting --crash-rank1")
    shown = run(atoll_cmd("inspect", str(run_dir)))  # the failure's cause, not its pointer
    assert shown.returncode == 0 and "  1 x CommandFailed: the command exited with code 3; its " \
        "stderr ended with: starting --crash-rank1" in shown.stdout, shown.stdout


@pytest.mark.parametrize(("mode", "result", "aborted"), [
    ("--abort-leader", 0.25, 0),
    ("--abort-rank1-first", 0.5, 1),
    ("--abort-rank1-leader-lingers", 0.5, 1),
])
def test_a_crash_on_the_way_out_after_the_result_line_keeps_the_result(tmp_path, mode, result,
                                                                        aborted):
    """torch's gloo teardown aborts a finished script now and then (SIGABRT at exit), on any
    rank, and a partner may end so before the leader has said its result: the result counts,
    and the rank says in one line how its command ended."""
    done, ind, took = broken_on_two_ranks(tmp_path, mode, "{work_dir}")
    assert ind["status"].tolist() == [int(Status.OK)], ind["error"]
    assert ind["loss"].tolist() == [result]
    said = [line for line in done.stderr.splitlines() if "after the leader's result" in line]
    assert len(said) == 1, done.stderr[-3000:]
    assert said[0].endswith(
        f"WARNING atoll.objectives.command: individual {int(ind['id'][0])}: the command of "
        f"worker rank {aborted} was killed by SIGABRT after the leader's result line; the "
        f"result counts; its stderr ended with: starting {mode}"), said[0]
    assert took < 60  # a lingering leader was stopped after stop_grace


def broken_on_two_ranks(tmp_path: Path, *words: str) -> tuple[Any, Any, float]:
    """One evaluation of broken.py ``words`` on a worker of 2 ranks, stop_grace 2 s: the
    finished job, its record's individuals, and the seconds it took."""
    config = PLAIN.replace(f'"{COMMANDS}/train_plain.py"', ", ".join(
        f'"{word}"' for word in (f"{COMMANDS}/broken.py", *words)))
    run_dir = tmp_path / "run"
    started = time.monotonic()
    done = mpirun_atoll(2, "search", "--config", str(write(tmp_path, config)), "--run-dir",
                        str(run_dir), "--set", "search.ranks_per_worker=2",
                        "--set", "search.evaluations=1", "--set", "objective.stop_grace=2",
                        timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done, open_run(run_dir).individuals, time.monotonic() - started


def test_a_partner_still_running_after_the_leaders_result_is_stopped_and_the_result_counts(
        tmp_path):
    """Rank 0's script said its result and exited; rank 1's runs on (in a barrier the leader
    left, say): stop_grace seconds later it is stopped, said in one line, and the result
    counts, where the worker used to wait for it for ever."""
    done, ind, took = broken_on_two_ranks(tmp_path, "--rank1-lingers")
    assert took < 60
    assert ind["status"].tolist() == [int(Status.OK)] and ind["loss"].tolist() == [0.75]
    said = [line for line in done.stderr.splitlines() if "still running" in line]
    assert len(said) == 1 and said[0].endswith(
        f"individual {int(ind['id'][0])}: the command of worker rank 1 was still running "
        "objective.stop_grace = 2 s after rank 0's had ended: stopped"), done.stderr[-3000:]


def test_a_failures_quote_of_a_huge_stderr_line_is_cut(tmp_path):
    config = PLAIN.replace(f'"{COMMANDS}/train_plain.py"', f'"{COMMANDS}/broken.py", '
                                                           '"--long-stderr"')
    run_dir = tmp_path / "run"
    done = mpirun_atoll(1, "search", "--config", str(write(tmp_path, config)), "--run-dir",
                        str(run_dir), "--set", "search.evaluations=1", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    error = str(open_run(run_dir).individuals["error"][0])
    assert error.endswith("x" * 400 + "... (99600 more characters)"), error[-200:]
    assert max(map(len, done.stderr.splitlines())) < 2000  # the warning quotes it cut too
    log = RunPaths(run_dir).command_log(0, 0).read_text()
    assert "x" * 100_000 in log  # whole in the command's log


def test_a_command_that_cannot_start_fails_every_rank_of_the_worker_without_a_hang(tmp_path):
    config = PLAIN.replace('"{python}"', '"{work_dir}/missing"')
    run_dir = tmp_path / "run"
    ind = two_failures_on_a_two_rank_worker(tmp_path, config, run_dir)
    for row in ind:
        missing = RunPaths(run_dir).work_dir(int(row["id"])) / "missing"
        said = f"cannot start '{missing}' in {tmp_path}: No such file or directory"
        assert str(row["error"]) == "ranks 0-1: CommandFailed: ChildError: objective.command: " \
            + said  # rank 0's and rank 1's, said once


def test_the_helper_prints_the_lines_the_objective_reads(capsys):
    report(2, val_loss=0.25, val_accuracy=0.9)
    result(0.125)
    lines = Lines()
    for line in capsys.readouterr().out.splitlines():
        lines.add(line)
    assert lines.take_epochs() == [(2, {"val_loss": 0.25, "val_accuracy": 0.9})]
    assert lines.result == 0.125
    for bad in ("ATOLL epoch=1", "ATOLL epoch=1.5 loss=2", "ATOLL loss=abc", "ATOLL hello",
                "ATOLL result=1 epoch=2"):
        with pytest.raises(BadLine):
            Lines().add(bad)


BASE = {"objective": {"command": ["{python}", "train.py", "--lr", "{lr}"]},
        "space": {"lr": {"type": "float", "low": 0.0, "high": 1.0}}}


@pytest.mark.parametrize(("change", "message"), [
    (lambda t: t["objective"]["command"].append("{lrr}"),
     "objective.command[4]: unknown placeholder {lrr}; known: {lr}, {id}, {run_dir}"),
    (lambda t: t["objective"].update(name="sphere"), "objective.name: a command objective "
                                                     "takes no name"),
    (lambda t: t["objective"].update(command="train.py"), "objective.command: expected a "
                                                          "non-empty list of strings"),
    (lambda t: t["objective"]["command"].append("{"), "objective.command[4]: '{' is not a valid "
                                                      "template"),
    (lambda t: t["objective"].update(env={"N": 3}), "objective.env.N: expected a string"),
    (lambda t: t["objective"].update(env={"N": "{nope}"}), "objective.env.N: unknown "
                                                           "placeholder {nope}"),
    (lambda t: t.update(space={"id": {"type": "int", "low": 0, "high": 3}}),
     "space.id: the name is a command placeholder"),
    (lambda t: t["objective"].pop("command") and t["objective"].update(result_metric="acc"),
     "objective.result_metric: only a command objective takes it"),
    (lambda t: t["objective"].update(results="files"), "objective.results: expected one of "
                                                       "'stdout', 'file', got 'files'; did you "
                                                       "mean 'file'?"),
    (lambda t: t.update(space={"checkpoint_dir": {"type": "int", "low": 0, "high": 3}}),
     "space.checkpoint_dir: the name is a command placeholder"),
    (lambda t: t["objective"]["command"].append("{lr:.3q}"),
     "objective.command[4]: {lr:.3q} cannot format lr = 0.0 (Unknown format code 'q'"),
    (lambda t: t["objective"]["command"].append("{lr!z}"),
     "objective.command[4]: {lr!z} cannot format lr = 0.0 (Unknown conversion specifier z)"),
    (lambda t: t["space"].update(act={"type": "categorical", "choices": ["relu", "tanh"]})
     or t["objective"]["command"].append("--act={act:.3f}"),
     "objective.command[4]: {act:.3f} cannot format act = 'relu' (Unknown format code 'f'"),
    (lambda t: t["space"].update(n={"type": "int", "low": -5, "high": 10})
     or t["objective"]["command"].append("{n:c}"),
     "objective.command[4]: {n:c} cannot format n = -5 (%c arg not in range"),
    (lambda t: t["objective"]["command"].append("{run_dir:>40}"),
     "objective.command[4]: {run_dir:>40} cannot format run_dir = PurePosixPath('/run')"),
    (lambda t: t["objective"].update(env={"A=B": "1"}),
     "objective.env: 'A=B' is not a variable name"),
    (lambda t: t["objective"].update(env={"": "1"}), "objective.env: '' is not a variable name"),
    (lambda t: t["objective"]["command"].append("a\0b"),
     "objective.command[4]: holds a NUL character"),
])
def test_bad_command_configs_are_one_line(change, message):
    table = copy.deepcopy(BASE)
    change(table)
    with pytest.raises(ConfigError) as caught:
        parse_config(table)
    assert str(caught.value).startswith(message), caught.value
    assert "\n" not in str(caught.value)


def test_format_specs_that_fit_their_placeholders_are_taken():
    table = copy.deepcopy(BASE)
    table["space"]["act"] = {"type": "categorical", "choices": ["relu", "tanh"]}
    table["objective"]["command"] += ["{lr:.3g}", "{id:06d}", "{act:>6}", "{work_dir!s:>40}",
                                      "{resume_dir!s}"]
    table["objective"]["env"] = {"TAG": "{act!r}-{lr:e}"}
    assert parse_config(table).objective.command[-5:] == tuple(table["objective"]["command"][-5:])


def test_a_command_config_survives_the_record_round_trip():
    config = parse_config({**BASE, "objective": {**BASE["objective"], "env": {"A": "{id}"},
                                                 "result_metric": "val_loss",
                                                 "results": "file"}})
    assert parse_config(config_to_dict(config)) == config


def started_search(tmp_path: Path, objective: str, *args: str) -> subprocess.Popen[str]:
    """A search of PLAIN's settings in tmp_path/run, its objective section's ``command =``
    and what follows it given (TOML), running in the background."""
    config = PLAIN.split("[objective]")[0] + f"""[objective]
command = {objective}
[space.lr]
type = "float"
low = 0.0
high = 1.0
"""
    return subprocess.Popen(
        atoll_cmd("search", "--config", str(write(tmp_path, config)), "--run-dir",
                  str(tmp_path / "run"), "-q", *args),
        cwd=ROOT, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("stubborn", [False, True])
def test_a_stopping_job_ends_its_command_and_records_it_interrupted(tmp_path, stubborn):
    run_dir = tmp_path / "run"
    proc = started_search(tmp_path, f"""["{{python}}", "{COMMANDS}/slow.py", "{{work_dir}}"{
        ', "--stubborn"' * stubborn}]\nstop_grace = 1""", "--set", "search.evaluations=2")
    pid_file = RunPaths(run_dir).work_dir(0) / "pid"
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    time.sleep(0.3)
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 75, err[-2000:]
    assert not Path(f"/proc/{child}").exists()  # a stubborn one got SIGKILL after stop_grace
    assert pid_file.with_name("terminated").exists() != stubborn
    ind = open_run(run_dir).individuals
    assert ind["status"].tolist() == [int(Status.INTERRUPTED)]


def running(pid: int, script: str, count: int, timeout: float = 30) -> list[int]:
    """The ``count`` processes below ``pid`` whose command line names ``script``."""
    deadline = time.monotonic() + timeout
    while True:
        found = []
        for child in descendants(pid):
            with contextlib.suppress(OSError):
                words = Path(f"/proc/{child}/cmdline").read_bytes().decode(errors="replace")
                if script in words and "supervisor.py" not in words:
                    found.append(child)
        if len(found) >= count or time.monotonic() > deadline:
            assert len(found) == count, found
            return found
        time.sleep(0.05)


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_stop_between_two_lines_reaches_the_script_at_once(tmp_path, ranks):
    """The script said one epoch and is then silent for minutes: the job still ends within
    seconds of SIGUSR1 (in-process, and mpirun with a 2-rank worker), every rank's script got
    SIGTERM, and the individual is recorded as interrupted."""
    config = PLAIN.split("[objective]")[0] + f"""[objective]
command = ["{{python}}", "{COMMANDS}/slow.py", "{{work_dir}}", "--one-line"]
stop_grace = 5
[space.lr]
type = "float"
low = 0.0
high = 1.0
"""
    run_dir = tmp_path / "run"
    args = ["search", "--config", str(write(tmp_path, config)), "--run-dir", str(run_dir),
            "-q", "--set", "search.evaluations=2", "--set", f"search.ranks_per_worker={ranks}",
            # a metric the script never reports: its value is then nan, yet it failed nowhere
            "--set", "pruning.metric=val_accuracy"]
    proc = subprocess.Popen(mpirun_cmd(2, "-m", "atoll", *args) if ranks == 2
                            else atoll_cmd(*args), cwd=ROOT, env=mpi_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_words(RunPaths(run_dir).command_log(0, 0), 2)  # "ATOLL epoch=0 val_loss=1.0"
    scripts = running(proc.pid, "slow.py", ranks)
    time.sleep(0.5)  # the worker has read the line and waits for the next
    began = time.monotonic()
    proc.send_signal(signal.SIGUSR1)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()  # no test leaves a job behind (a no-op once it ended)
    took = time.monotonic() - began
    assert proc.returncode == 75, err[-2000:]
    assert took < 15, took  # not the script's ten minutes of silence, nor its stop_grace
    assert not any(alive(p) for p in scripts)
    assert RunPaths(run_dir).work_dir(0).joinpath("terminated").exists()
    assert open_run(run_dir).individuals["status"].tolist() == [int(Status.INTERRUPTED)]
    assert "failed" not in err, err[-2000:]  # interrupted is all that is said of it


def test_a_python_scripts_plain_print_reaches_the_worker_at_once(tmp_path):
    """stdout is a pipe, which a Python script buffers: without PYTHONUNBUFFERED its epoch
    line would reach Atoll only at its end, and a job stopped meanwhile would record nothing
    of the epochs it trained (nor save the checkpoint that lets the next job continue it)."""
    config = PLAIN.split("[objective]")[0] + f"""[objective]
command = ["{{python}}", "{COMMANDS}/slow.py", "{{work_dir}}", "--one-line", "--no-flush"]
stop_grace = 5
{X_SPACE}"""
    run_dir = tmp_path / "run"
    env = {k: v for k, v in mpi_env().items() if k != "PYTHONUNBUFFERED"}  # as a user's shell
    proc = subprocess.Popen(
        atoll_cmd("search", "--config", str(write(tmp_path, config)), "--run-dir",
                  str(run_dir), "-q", "--set", "search.evaluations=1"),
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_words(RunPaths(run_dir).command_log(0, 0), 2, timeout=30)
        time.sleep(0.5)  # the worker has reported the epoch
        proc.send_signal(signal.SIGUSR1)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 75, err[-2000:]
    run = open_run(run_dir)
    assert run.individuals["status"].tolist() == [int(Status.INTERRUPTED)]
    assert run.epochs["epoch"].tolist() == [0]


RESUMABLE = PLAIN.split("[objective]")[0] + f"""[objective]
command = ["{{python}}", "{COMMANDS}/resumable.py", "--x", "{{x}}", "--out", "{{work_dir}}",
           "--resume", "{{resume_dir}}"]
stop_grace = 5
{X_SPACE}"""


def wait_for_words(path: Path, count: int, timeout: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = path.read_text().split() if path.exists() else []
        if len(lines) >= count:
            return lines
        time.sleep(0.05)
    raise AssertionError(f"{path}: fewer than {count} words after {timeout} s")


@pytest.mark.parametrize("stop", [signal.SIGUSR1, signal.SIGKILL])
def test_a_stopped_command_continues_from_its_own_checkpoint_in_the_next_job(tmp_path, stop):
    """SIGUSR1 (the job stops, the individual is recorded interrupted) or kill -9 (no row:
    the worker's small checkpoint of it says it may be continued); the next job gives the
    script its checkpoint directory to resume from, and each epoch runs once."""
    home = tmp_path / "home"  # the run directory is relative to it, the script runs elsewhere
    home.mkdir()
    run_dir, paths = home / "run", RunPaths(home / "run")
    proc = subprocess.Popen(
        atoll_cmd("search", "--config", str(write(tmp_path, RESUMABLE)), "--run-dir", "run",
                  "-q", "--set", "search.evaluations=1"),
        cwd=home, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    trace = paths.work_dir(0) / "epochs.txt"
    wait_for_words(trace, 3)
    script = int(paths.work_dir(0).joinpath("pid").read_text())
    proc.send_signal(stop)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == (75 if stop == signal.SIGUSR1 else -signal.SIGKILL), err[-2000:]
    deadline = time.monotonic() + 10
    while alive(script) and time.monotonic() < deadline:  # SIGKILL: its parent's death ends it
        time.sleep(0.05)
    assert not alive(script)
    saved = json.loads(paths.command_checkpoint_dir(0).joinpath("state.json").read_text())
    assert saved["epoch"] >= 2 and paths.checkpoint_file(0).exists()

    again = run(atoll_cmd("resume", "run", "-q"), timeout=120, cwd=home)
    assert again.returncode == 0, again.stderr[-2000:]
    ind = open_run(run_dir).individuals
    assert ind["id"].tolist() == [0] and ind["status"].tolist() == [int(Status.OK)]
    assert wait_for_words(trace, 8) == [str(e) for e in range(8)]  # each epoch ran once
    loss = 10.0
    for _ in range(8):
        loss = loss * 0.5 + float(ind["x"][0])
    assert ind["loss"][0] == pytest.approx(loss)  # the state went on from its checkpoint
    assert not paths.command_checkpoint_dir(0).exists() and not paths.checkpoint_file(0).exists()


def test_a_scripts_checkpoint_that_no_epoch_line_followed_is_kept_and_said_on_resume(tmp_path):
    """kill -9 of a job whose script saves its checkpoint but says no epoch line: no row and
    no small checkpoint say the individual's parameters, so the next job cannot continue it;
    it leaves the script's files as they are and says so, in one line."""
    config = RESUMABLE.replace('"{resume_dir}"]', '"{resume_dir}", "--no-epochs"]')
    run_dir, paths = tmp_path / "run", RunPaths(tmp_path / "run")
    proc = subprocess.Popen(
        atoll_cmd("search", "--config", str(write(tmp_path, config)), "--run-dir", str(run_dir),
                  "-q", "--set", "search.evaluations=1"),
        cwd=ROOT, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_words(paths.work_dir(0) / "epochs.txt", 2)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    saved = paths.command_checkpoint_dir(0) / "state.json"
    assert saved.exists() and not paths.checkpoint_file(0).exists()
    again = run(atoll_cmd("resume", str(run_dir), "-q"), timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    said = [line for line in again.stderr.splitlines() if "cannot be continued" in line]
    assert len(said) == 1 and said[0].endswith(
        f"1 folder(s) of a command's own checkpoint ({paths.command_checkpoint_dir(0)}, for "
        "one) belong to evaluations a killed job never recorded, and whose parameters Atoll "
        "had not saved (no 'ATOLL epoch=' line came after the script saved, or no room was "
        "left for Atoll's checkpoint): they cannot be continued and stay as they are; delete "
        "them if you do not need them"), again.stderr[-2000:]
    assert saved.exists()
    assert open_run(run_dir).individuals["status"].tolist() == [int(Status.OK)]


def test_results_from_a_file_count_the_leaders_lines_and_not_stdout(tmp_path):
    config = PLAIN.split("[objective]")[0] + f"""[objective]
command = ["{{python}}", "{COMMANDS}/file_results.py", "{{x}}"]
results = "file"
{X_SPACE}"""
    run, paths = two_rank_search(tmp_path, config, ranks=2, evaluations=2, timeout=120)
    ind = run.individuals
    assert (ind["status"] == int(Status.OK)).all() and len(ind) == 2, ind["error"]
    for row in ind:
        ident, x = int(row["id"]), float(row["x"])
        assert row["loss"] == x
        curve = run.epochs[run.epochs["individual"] == ident]
        assert curve["val_loss"].tolist() == pytest.approx([x + 3, x + 2, x + 1])
        assert "ATOLL result=999" in paths.command_log(ident, 0).read_text()
        assert paths.work_dir(ident).joinpath("results-rank0.txt").read_text().endswith(
            f"ATOLL result={x}\n")


def test_a_results_file_is_read_in_whole_lines_from_where_it_ended(tmp_path):
    """A continued evaluation's earlier lines were read by its earlier job."""
    path = tmp_path / "results.txt"
    path.write_text("ATOLL epoch=0 loss=1.0\n")
    results = ResultsFile(path)
    assert results.new_lines() == []
    with path.open("a") as out:
        out.write("ATOLL epoch=1 loss=0.5\nATOLL res")
    assert results.new_lines() == ["ATOLL epoch=1 loss=0.5"]
    with path.open("a") as out:
        out.write("ult=0.5\n")
    assert results.new_lines() == ["ATOLL result=0.5"]
    path.write_text("ATOLL result=0.25\n")  # written anew from its start
    assert results.new_lines() == ["ATOLL result=0.25"]


def test_a_command_ends_when_its_rank_is_killed_with_sigkill(tmp_path):
    """The supervisor hears of the rank's death: a script that says nothing (so no broken pipe
    ends it) still ends."""
    config = PLAIN.replace(f'"{COMMANDS}/train_plain.py"', f'"{COMMANDS}/broken.py", "--hang"')
    proc = subprocess.Popen(
        atoll_cmd("search", "--config", str(write(tmp_path, config)), "--run-dir",
                  str(tmp_path / "run"), "-q"),
        cwd=ROOT, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = RunPaths(tmp_path / "run").command_log(0, 0)
    wait_for_words(log, 2)  # "starting --hang"
    scripts = running(proc.pid, "broken.py", 1)
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while alive(scripts[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not alive(scripts[0])
    finally:
        if alive(scripts[0]):  # no test leaves it behind
            os.kill(scripts[0], signal.SIGKILL)


@pytest.mark.parametrize("own_session", [False, True])
def test_every_process_below_a_rank_killed_with_sigkill_ends(tmp_path, own_session):
    """A shell wrapper's background script ends with the rank, also when it left the wrapper's
    process group and session (as a torchrun-like launcher's workers do): the supervisor, the
    rank's direct child, is their subreaper and hears of the rank's death."""
    run_dir = tmp_path / "run"
    proc = started_search(tmp_path, f"""["sh", "-c", "{{python}} {COMMANDS}/wrapped.py {{work_dir}}{
        ' --own-session' * own_session} & wait"]""")
    work, deadline = RunPaths(run_dir).work_dir(0), time.monotonic() + 60
    while not list(work.glob("grandchild-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    note = next(work.glob("grandchild-*"))
    grandchild = int(note.name.split("-")[1])
    below = descendants(proc.pid)  # the supervisor, the shell, the script
    assert grandchild in below and len(below) == 3, below
    assert (int(note.read_text()) == grandchild) == own_session  # its own process group
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while any(alive(p) for p in below) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in below if alive(p)]
    for pid in left:  # no test leaves one behind
        os.kill(pid, signal.SIGKILL)
    assert not left


def test_the_supervisor_ends_everything_below_it_however_often_the_end_signal_comes(tmp_path):
    """The death signal comes once for every thread of a dying rank: the supervisor takes each
    of a burst (its default action would end the supervisor alone) and still ends the shell
    and its script before it exits as killed. Started as a rank starts it, this test the rank."""
    with _started(["sh", "-c", "sleep 600 & wait"], os.environ, tmp_path) as supervisor:
        deadline = time.monotonic() + 30
        while len(below := descendants(supervisor.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        for _ in range(20):
            os.kill(supervisor.pid, END)
            time.sleep(0.002)
        try:
            assert supervisor.wait(timeout=30) == -signal.SIGKILL
            assert not [pid for pid in below if alive(pid)]
        finally:
            for pid in below:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@pytest.mark.slow  # srun of a DDP script on a 2-rank worker
def test_a_two_rank_command_search_launched_by_srun(slurm, tmp_path):
    """No mpirun: srun starts the ranks (PMIx), each starts the DDP script with torchrun's
    variables, and the script's gloo world is the worker's two ranks."""
    run_dir = tmp_path / "run"
    config = write(tmp_path, DDP.split("[pruning]")[0] + "[distributed]\ntimeout = 20\n")
    done = slurm_run(["srun", "--mpi=pmix", "--nodes=1", "--ntasks-per-node=2",
                      str(BIN / "atoll"), "search", "--config", str(config), "--run-dir",
                      str(run_dir), "--set", "search.ranks_per_worker=2",
                      "--set", "search.evaluations=2", "-q"], job_env(slurm), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    ind, paths = open_run(run_dir).individuals, RunPaths(run_dir)
    assert (ind["status"] == int(Status.OK)).all() and len(ind) == 2, ind["error"]
    assert (ind["loss"] == ind["x"]).all()
    for ident in ind["id"].tolist():
        for rank in (0, 1):
            trace = paths.work_dir(int(ident)).joinpath(f"rank{rank}.txt").read_text()
            assert trace.split() == ["0", "1", "2", "3"]


PROBE = f"""seed = 2
[objective]
command = ["{{python}}", "{COMMANDS}/world_probe.py", "--x", "{{x}}", "--out", "{{work_dir}}"]
{X_SPACE}[search]
ranks_per_worker = 2
islands = 1
[distributed]
timeout = 20
"""


def check_worlds(run_dir: Path, evaluations: int) -> list[dict[str, Any]]:
    """Every rank's script saw the worker as a torchrun world of 2 and no MPI launcher, and
    its own MPI_Init made a world of its own; what each saw (with the individual's worker)."""
    ind, paths = open_run(run_dir).individuals, RunPaths(run_dir)
    assert (ind["status"] == int(Status.OK)).all() and len(ind) == evaluations, ind["error"]
    views = []
    for ident, worker in zip(ind["id"].tolist(), ind["worker"].tolist(), strict=True):
        for rank in (0, 1):
            seen = json.loads(paths.work_dir(int(ident)).joinpath(f"rank{rank}.json").read_text())
            assert seen["torchrun"] == {
                "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1",
                "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": "2", "ROLE_NAME": "default",
                "TORCHELASTIC_RUN_ID": f"atoll-ind{ident}", "TORCHELASTIC_USE_AGENT_STORE": "False"}
            assert seen["torchelastic_launched"] is True  # how Lightning 2 picks torchrun's world
            assert seen["launcher"] == [] and seen["mpi_world"] == [1, 0]
            assert seen["port_taken_by_others"] is False  # the leader holds it for the script
            assert seen["gloo_world"] == [2, 2]
            views.append({**seen, "worker": worker})
    return views


@pytest.mark.slow  # scripts that start MPI of their own, on 2-rank workers
def test_a_script_sees_a_torchrun_world_and_its_own_mpi_init_stays_out_of_the_job(
        tmp_path, monkeypatch):
    """A script whose library calls MPI_Init (mpi4py here; Lightning's MPI detection, DeepSpeed's
    MPI discovery) joined the job as a second copy of its rank and crashed the rank (SIGSEGV in
    its next collective); without the launcher's variables it gets a world of its own, and
    torchrun's variables say which world is the worker's. With the job's 4 GPUs visible to
    every rank, each worker's scripts see their worker's 2, so ``cuda:LOCAL_RANK`` is not
    the other worker's GPU (it was: both workers trained on the first two). As mpirun in a
    SLURM batch script, where every rank inherits the batch step's ``SLURM_PROCID=0``, each
    script sees its worker's SLURM step, on this host (no ``SLURMD_NODENAME``)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-a,GPU-b,GPU-c,GPU-d")
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    run_dir = tmp_path / "run"
    done = mpirun_atoll(4, "search", "-q", "--config", str(write(tmp_path, PROBE)),
                        "--run-dir", str(run_dir), "--set", "search.evaluations=4", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    views = check_worlds(run_dir, 4)
    assert "OMPI_MCA_btl_tcp_if_include" in views[0]["ompi_mca"]  # (conftest.py): they stay
    assert {(v["worker"], v["cuda_visible"]) for v in views} == {(0, "GPU-a,GPU-b"),
                                                                 (1, "GPU-c,GPU-d")}
    for seen in views:
        rank = seen["torchrun"]["RANK"]
        assert seen["slurm_task"] == {
            "SLURM_PROCID": rank, "SLURM_LOCALID": rank, "SLURM_NODEID": "0",
            "SLURM_GTIDS": "0,1", "SLURM_NTASKS": "2", "SLURM_NPROCS": "2", "SLURM_NNODES": "1",
            "SLURM_TASKS_PER_NODE": "2", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NUM_NODES": "1",
            "SLURM_STEP_NODELIST": socket.gethostname(), "SLURM_STEP_TASKS_PER_NODE": "2"}


@pytest.mark.parametrize(("visible", "node", "count", "share"), [
    (None, NodePlace(2, 4), None, ()),       # no CUDA_VISIBLE_DEVICES, no NVIDIA driver: none
    (None, NodePlace(5, 8), 4, ("1",)),      # more ranks than GPUs: shared, as torch picks
    (None, NodePlace(0, 1), 4, ("0", "1", "2", "3")),  # the node's only rank: all of them
    ("0,1,2,3", NodePlace(2, 4), None, ("2",)),        # the job's list on every rank: one
    ("0,1,2,3", NodePlace(1, 2), None, ("1", "3")),    # 2 ranks, 4 GPUs: every second
    ("3", NodePlace(1, 2, same_gpus=False), 8, ("3",)),  # its own (--gpus-per-task=1)
    ("2,3", NodePlace(1, 2, same_gpus=False), 8, ("2", "3")),  # its own 2: both
    ("GPU-x, MIG-y", NodePlace(1, 2), None, ("MIG-y",)),  # names as they are
    ("", NodePlace(), 4, ()), ("NoDevFiles", NodePlace(), None, ())])  # none granted
def test_a_rank_takes_its_share_of_the_gpus_first_the_one_a_python_objective_uses(
        visible, node, count, share):
    assert gpu_share(visible, node, count) == share


def test_a_worker_lists_its_ranks_gpus_first_ones_first_when_each_has_its_own():
    assert worker_gpus([("2",), ("3",)]) == "2,3"
    assert worker_gpus([("0", "2"), ("1", "3")]) == "0,1,2,3"  # cuda:LOCAL_RANK: each first
    assert worker_gpus([("0", "1", "2", "3")]) == "0,1,2,3"
    assert worker_gpus([("2",), ()]) is None
    assert worker_gpus([("1",), ("1",)]) is None  # shared: left as each rank has it


def test_the_nodes_only_rank_gives_its_command_every_gpu_for_a_torchrun_inside(tmp_path):
    """One rank on a node (a worker of one rank): its command may be ``torchrun
    --nproc-per-node 4 ...``, whose processes need all the GPUs the rank was granted."""
    config = """[objective]
command = ["sh", "-c", "echo $CUDA_VISIBLE_DEVICES > {work_dir}/gpus; echo ATOLL result={x}"]
""" + X_SPACE + """[search]
evaluations = 1
"""
    env = {**mpi_env(), "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    done = run(atoll_cmd("search", "--config", str(write(tmp_path, config)), "--run-dir",
                         str(tmp_path / "run"), "-q"), env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    ident = int(open_run(tmp_path / "run").individuals["id"][0])
    assert RunPaths(tmp_path / "run").work_dir(ident).joinpath("gpus").read_text() == "0,1,2,3\n"


TORCHRUN = '"{python}", "-m", "torch.distributed.run"'
ACROSS_NODES = ('"sh", "-c", "exec {python} -m torch.distributed.run --nnodes $GROUP_WORLD_SIZE '
                '--node-rank $GROUP_RANK --master-addr $MASTER_ADDR --master-port $MASTER_PORT')


@pytest.mark.slow  # torchrun agents under mpirun
@pytest.mark.parametrize("launch", [TORCHRUN, ACROSS_NODES], ids=["one node", "across nodes"])
def test_a_command_may_be_torchrun_itself_on_a_worker_of_one_rank(tmp_path, launch):
    """A user's launch line as it is: torchrun starts the script's 2 processes, whose rank 0's
    ATOLL lines come through torchrun's output. Across nodes (README's recipe, one rank of the
    worker per node; run here on one node): torchrun's flags from the worker's variables, its
    store on the port the leader holds."""
    script = f"{ROOT}/examples/train_script.py"
    if launch == TORCHRUN:
        command = f'{TORCHRUN}, "--nproc-per-node", "2", "{script}", "--lr", "{{lr}}", ' \
                  '"--epochs", "3"'
    else:
        command = f'{ACROSS_NODES} --nproc-per-node 2 {script} --lr {{lr}} --epochs 3"'
    config = f"""seed = 3
[objective]
command = [{command}]
env = {{ OMP_NUM_THREADS = "1" }}
[space.lr]
type = "float"
low = 0.01
high = 0.1
[search]
evaluations = 2
"""
    done = run(atoll_cmd("search", "--config", str(write(tmp_path, config)), "--run-dir",
                         str(tmp_path / "run"), "-q"), timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    found = open_run(tmp_path / "run")
    assert (found.individuals["status"] == int(Status.OK)).all(), found.individuals["error"]
    assert sorted(found.epochs["epoch"].tolist()) == [0, 0, 1, 1, 2, 2]


@pytest.mark.slow  # torchrun agents under mpirun
def test_torchrun_as_the_command_takes_the_workers_rendezvous_from_the_environment(tmp_path):
    """Two one-rank workers on one host each start ``torchrun --nproc-per-node 2`` with no
    flag of place: torchrun's own environment flags (``PET_*``) give its agent the worker's
    nodes and the port the leader holds, so on a worker of one rank per node it spans them.
    Here both workers' rendezvous listen at once, each on its own leader's port."""
    config = f"""seed = 4
[objective]
command = [{TORCHRUN}, "--nproc-per-node", "2", "{COMMANDS}/agent_probe.py", "{{work_dir}}",
           "{{x}}"]
env = {{ OMP_NUM_THREADS = "1" }}
{X_SPACE}[search]
evaluations = 4
"""
    run_dir = tmp_path / "run"
    done = mpirun_atoll(2, "search", "-q", "--config", str(write(tmp_path, config)),
                        "--run-dir", str(run_dir), timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    ind, paths = open_run(run_dir).individuals, RunPaths(run_dir)
    assert (ind["status"] == int(Status.OK)).all() and len(ind) == 4, ind["error"]
    assert set(ind["worker"].tolist()) == {0, 1}
    for ident in ind["id"].tolist():
        for rank in (0, 1):
            seen = json.loads(paths.work_dir(int(ident)).joinpath(f"rank{rank}.json").read_text())
            assert seen["MASTER_PORT"] == seen["PET_MASTER_PORT"], seen  # the leader's port
            assert (seen["GROUP_WORLD_SIZE"], seen["WORLD_SIZE"]) == ("1", "2")


@pytest.mark.parametrize("command", [
    ["torchrun"], ["/opt/bin/torchrun", "--standalone"],
    ["{python}", "-m", "torch.distributed.run"],
    ["python", "-u", "-m", "torch.distributed.launch"],
    ["env", "OMP_NUM_THREADS=1", "torchrun", "t.py"],
    ["sh", "-c", "exec torchrun --nproc-per-node 4 train.py --lr {lr}"],  # the README's line
    ["bash", "-lc", "cd /data && A=1 exec torchrun t.py; echo done"],
    ["sh", "-c", "exec {python} -m torch.distributed.run t.py"],
    ["/usr/bin/env", "-i", "-u", "X", "torchrun"], ["bash", "--norc", "-c", "torchrun t.py"],
    ["bash", "-o", "pipefail", "-c", "torchrun t.py | tee log"]])
def test_torchrun_is_known_however_it_is_started(command):
    assert starts_torchrun(command)


@pytest.mark.parametrize("command", [
    ["{python}", "train.py"], ["python", "-m", "train", "torch.distributed.run"],
    ["sh", "-c", "echo torchrun"], ["sh", "-c", "python train.py --launcher torchrun"],
    ["sh", "torchrun.sh"], ["sh", "-c", "unbalanced 'quote torchrun"],
    ["bash", "--rcfile", "torchrun", "-c", "python t.py"], ["env", "python", "t.py"]])
def test_a_script_is_not_torchrun(command):
    assert not starts_torchrun(command)


def test_torchrun_on_a_worker_with_two_ranks_on_a_node_is_refused_at_the_start(tmp_path):
    """Each rank would start a torchrun of its own, every one training the individual alone
    on the node: the job refuses to start with the line the doctor shows, and writes nothing."""
    config = f"""[objective]
command = [{TORCHRUN}, "--nproc-per-node", "2", "{COMMANDS}/agent_probe.py", "{{work_dir}}",
           "{{x}}"]
{X_SPACE}[search]
ranks_per_worker = 2
evaluations = 4
"""
    run_dir = tmp_path / "run"
    done = mpirun_atoll(2, "search", "-q", "--config", str(write(tmp_path, config)),
                        "--run-dir", str(run_dir), timeout=120)
    assert done.returncode == EXIT_BAD_INPUT, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if line.startswith("atoll: error: ")]
    assert said == [
        "atoll: error: objective.command is torchrun, the launcher of a node's processes, but "
        "worker 0 has 2 ranks on 1 node(s): each rank would start a torchrun of its own; run one "
        "Atoll rank per node (srun --ntasks-per-node=1), or set search.ranks_per_worker = 1"], \
        done.stderr
    assert "Traceback" not in done.stderr and not run_dir.exists()


@pytest.mark.slow  # srun with GPUs per task
def test_under_srun_a_script_keeps_the_slurm_job_and_not_its_mpi_place(slurm, tmp_path):
    """Also: with GPUs per task, Slurm shows each rank its own alone, where ``cuda:LOCAL_RANK``
    of the worker's second rank named its own second GPU (with one per task: no device); its
    script sees the worker's four, each rank's first at its ``LOCAL_RANK``."""
    run_dir = tmp_path / "run"
    done = slurm_run(["srun", "--mpi=pmix", "--nodes=1", "--ntasks-per-node=2",
                      "--gpus-per-task=2", str(BIN / "atoll"), "search", "--config",
                      str(write(tmp_path, PROBE)), "--run-dir", str(run_dir),
                      "--set", "search.evaluations=2", "-q"],
                     job_env(slurm), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    views = check_worlds(run_dir, 2)
    assert all(seen["slurm_job"] for seen in views)
    granted = {seen["cuda_visible"] for seen in views}
    assert len(granted) == 1 and len(set(granted.pop().split(","))) == 4, views


@pytest.mark.slow  # srun of two nodes and a gloo group per worker
def test_under_srun_a_script_that_reads_slurm_procid_joins_its_workers_world(slurm, tmp_path):
    """Many SLURM recipes take a DDP rank and world from ``SLURM_PROCID`` and ``SLURM_NTASKS``.
    Inherited, they named the job's: the second worker's scripts took ranks 2 and 3 of a
    world of 4 and never met. Each script sees its worker as a step of its own, on the nodes
    it spans (cyclic: each worker has a rank on n1 and one on n2)."""
    run_dir = tmp_path / "run"
    done = slurm_run(["srun", "--mpi=pmix", "--nodes=2", "--ntasks-per-node=2",
                      "--distribution=cyclic", str(BIN / "atoll"), "search", "--config",
                      str(write(tmp_path, PROBE)), "--run-dir", str(run_dir),
                      "--set", "search.evaluations=4", "-q"], job_env(slurm), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    views = check_worlds(run_dir, 4)
    assert {seen["worker"] for seen in views} == {0, 1}
    for seen in views:
        rank = int(seen["torchrun"]["RANK"])
        assert seen["slurm_task"] == {
            "SLURM_PROCID": str(rank), "SLURM_LOCALID": "0", "SLURM_NODEID": str(rank),
            "SLURM_GTIDS": str(rank), "SLURM_NTASKS": "2", "SLURM_NPROCS": "2",
            "SLURM_NNODES": "2", "SLURM_TASKS_PER_NODE": "1(x2)",
            "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NUM_NODES": "2",
            "SLURM_STEP_NODELIST": "n1,n2", "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
            "SLURM_NTASKS_PER_NODE": "1",  # asked 2 for the job
            "SLURM_STEP_ID": "0", "SLURM_STEP_LAUNCHER_PORT": seen["slurm_task"][
                "SLURM_STEP_LAUNCHER_PORT"]}, seen["slurm_task"]


@pytest.mark.parametrize(("nodes", "rank", "expected"), [
    (["n1", "n1", "n2", "n2"], 3, {"SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
                                   "SLURM_GTIDS": "2,3", "SLURM_TASKS_PER_NODE": "2(x2)"}),
    (["a", "b", "a"], 2, {"SLURM_LOCALID": "1", "SLURM_NODEID": "0", "SLURM_GTIDS": "0,2",
                          "SLURM_STEP_NODELIST": "a,b", "SLURM_TASKS_PER_NODE": "2,1"}),
    (["x"], 0, {"SLURM_NTASKS": "1", "SLURM_NNODES": "1", "SLURM_TASKS_PER_NODE": "1"})])
def test_a_workers_slurm_step_numbers_its_nodes_by_their_first_rank(nodes, rank, expected):
    variables = slurm_step_variables(nodes, rank)
    assert {name: variables[name] for name in expected} == expected
    uniform = len({nodes.count(node) for node in nodes}) == 1  # one count per node fits
    assert set(variables) - {"SLURM_NTASKS_PER_NODE"} == set(SLURM_TASK_VARIABLES)
    assert ("SLURM_NTASKS_PER_NODE" in variables) == uniform


def test_asha_pauses_a_script_with_its_own_checkpoint_and_a_promotion_resumes_it(tmp_path):
    """pruning.rule = asha on a script that keeps its own checkpoint: an evaluation outside the
    best half at a rung is paused (not stopped), its directory kept; one that its island then
    promotes is continued from that directory, and each of its epochs runs once. Every
    candidate is random (the GA's first population), so later ones are not all better: some
    that paused early qualify as worse ones come."""
    config = RESUMABLE + """[search]
evaluations = 8
[evolution]
strategy = "ga"
population_size = 16
[pruning]
rule = "asha"
eta = 2
min_epochs = 1
max_epochs = 8
"""
    run_dir, paths = tmp_path / "run", RunPaths(tmp_path / "run")
    done = run(atoll_cmd("search", "--config", str(write(tmp_path, config)), "--run-dir",
                         str(run_dir), "-q"), timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "stopped instead" not in done.stderr, done.stderr[-3000:]
    parts = read_history(run_dir, 1)[0]
    paused = set(parts["id"][parts["status"] == int(Status.PAUSED)].tolist())
    assert paused, parts[["id", "status"]]
    last = open_run(run_dir).individuals
    promoted = set(last["id"][last["status"] == int(Status.OK)].tolist()) & paused
    assert promoted, last[["id", "status"]]
    for ident in promoted:
        epochs = paths.work_dir(ident).joinpath("epochs.txt").read_text().split()
        assert epochs == [str(e) for e in range(8)], (ident, epochs)  # resumed, none twice
    for ident in paused - set(last["id"][last["status"] != int(Status.PAUSED)].tolist()):
        assert paths.command_checkpoint_dir(ident).joinpath("state.json").exists()
