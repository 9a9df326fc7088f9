"""Progress while a search runs (rank 0's lines) and `atoll watch` from another shell: real
mpirun jobs and real CLI subprocesses reading the run's files."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import numpy as np

from atoll.individual import Status
from atoll.record import open_run
from conftest import ROOT, atoll_cmd, kill_tree, mpi_env, mpirun_atoll, mpirun_cmd

SLOW = ("--config", "tests/configs/slow_sphere.toml")
PROGRESS = re.compile(r"^\[atoll\] (\d+) of (\d+) done \((\d+)%\), [\d.]+/s, (\d+) failed")


def progress_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if PROGRESS.match(line)]


def test_rank_0_prints_plain_progress_lines_at_the_interval_and_a_last_one(tmp_path):
    run_dir = tmp_path / "run"
    done = mpirun_atoll(4, "search", *SLOW, "--run-dir", str(run_dir), "--set",
                        "search.generations=60", "--set", "objective.options.sleep=0.05",
                        "--set", "record.flush_interval=0.5", "--progress-interval", "0.5")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = progress_lines(done.stdout)
    assert len(lines) >= 3, done.stdout  # about 3 s of search at 0.5 s intervals
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", done.stdout)  # no control characters
    counts = [int(PROGRESS.match(line)[1]) for line in lines]
    assert counts == sorted(counts) and counts[-1] == 240
    assert lines[-1].endswith("job ended") and "240 of 240 done (100%)" in lines[-1]
    assert done.stdout.index(lines[-1]) < done.stdout.index("Run ")  # before the summary
    ind = open_run(run_dir).individuals
    best = ind[np.argmin(ind["loss"])]
    assert f"best loss {float(best['loss']):.6g} " in lines[-1]
    assert f"(id {int(best['id'])}: x0=" in lines[-1]


def test_the_progress_lines_and_the_summary_give_the_job_one_rate(tmp_path):
    done = mpirun_atoll(2, "search", *SLOW, "--run-dir", str(tmp_path / "run"), "--set",
                        "search.generations=15", "--progress-interval", "0.5")
    assert done.returncode == 0, done.stderr[-2000:]
    last = progress_lines(done.stdout)[-1]
    summary = next(line for line in done.stdout.splitlines() if line.startswith("This job: "))
    assert "30 of 30 done" in last and summary.startswith("This job: 30 evaluations in ")
    rate = re.search(r", ([\d.]+/s), ", last)[1]
    assert f"({rate}); results: " in summary, (last, summary)


def test_quiet_prints_no_progress_and_verbose_a_line_per_individual(tmp_path):
    quiet = mpirun_atoll(2, "search", *SLOW, "--run-dir", str(tmp_path / "q"), "--set",
                         "search.generations=10", "-q")
    assert quiet.returncode == 0 and "[atoll]" not in quiet.stdout
    verbose = mpirun_atoll(2, "search", *SLOW, "--run-dir", str(tmp_path / "v"), "--set",
                           "search.generations=10", "-v")
    assert verbose.returncode == 0, verbose.stderr[-2000:]
    each = [line for line in verbose.stdout.splitlines()
            if line.startswith("[atoll] individual ")]
    assert sorted(int(line.split()[2]) for line in each) == list(range(20))
    assert all(line.endswith(tuple("0123456789")) for line in each)  # "ok, loss X"


def start_search(run_dir, *, generations: int, flush_interval: float) -> subprocess.Popen[str]:
    """A 2-rank search of about 20 evaluations a second, in the background."""
    return subprocess.Popen(
        mpirun_cmd(2, "-m", "atoll", "search", *SLOW, "--run-dir", str(run_dir), "-q",
                   "--set", f"search.generations={generations}",
                   "--set", "objective.options.sleep=0.05",
                   "--set", f"record.flush_interval={flush_interval}"),
        cwd=ROOT, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)


def test_watch_follows_a_running_search_and_ends_with_it(tmp_path):
    run_dir = tmp_path / "run"
    search = start_search(run_dir, generations=80, flush_interval=0.5)
    try:
        while not (run_dir / "run.h5").exists() and search.poll() is None:
            time.sleep(0.1)
        watch = subprocess.run(atoll_cmd("watch", str(run_dir), "--interval", "0.5"), cwd=ROOT,
                               env=mpi_env(), capture_output=True, text=True, timeout=120)
        search.communicate(timeout=120)
    finally:
        if search.poll() is None:
            kill_tree(search)
    assert search.returncode == 0 and watch.returncode == 0, watch.stderr
    lines = progress_lines(watch.stdout)
    assert len(lines) >= 2 and lines[-1].endswith("job ended")  # it ended by itself
    assert "160 of 160 done (100%)" in lines[-1]
    ind = open_run(run_dir).individuals
    assert int(np.count_nonzero(ind["status"] == Status.OK)) == 160


def test_watch_ends_by_itself_when_the_job_it_follows_is_killed(tmp_path):
    """A killed job never records its end: the watcher sees that no live job holds the run
    directory any more, says so, and ends (before, it waited forever)."""
    run_dir = tmp_path / "run"
    search = start_search(run_dir, generations=400, flush_interval=0.2)
    watch = None
    try:
        while not (run_dir / "workers").is_dir() or not any((run_dir / "workers").iterdir()):
            assert search.poll() is None, search.communicate()[1][-2000:]
            time.sleep(0.1)
        watch = subprocess.Popen(atoll_cmd("watch", str(run_dir), "--interval", "0.5"),
                                 cwd=ROOT, env=mpi_env(), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        time.sleep(2.0)
        assert watch.poll() is None, watch.communicate()[1][-2000:]  # following the running job
        kill_tree(search)
        out, err = watch.communicate(timeout=60)
    finally:
        if search.poll() is None:
            kill_tree(search)
        if watch is not None and watch.poll() is None:
            watch.kill()
    assert watch.returncode == 0, err
    last = out.strip().splitlines()[-1]
    assert "ended without recording its end" in last and f"atoll resume {run_dir}" in last
    assert open_run(run_dir).jobs["exit_code"].tolist() == [-1]  # recorded as running


def test_watch_of_a_finished_run_prints_one_line_and_a_bad_dir_one_error(tmp_path):
    run_dir = tmp_path / "run"
    assert mpirun_atoll(1, "search", *SLOW, "--run-dir", str(run_dir), "-q", "--set",
                        "search.generations=3").returncode == 0
    done = subprocess.run(atoll_cmd("watch", str(run_dir)), cwd=ROOT, env=mpi_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and len(progress_lines(done.stdout)) == 1
    assert "3 of 3 done (100%)" in done.stdout and "job ended" in done.stdout
    bad = subprocess.run(atoll_cmd("watch", str(tmp_path / "nothing"), "--no-wait"), cwd=ROOT,
                         env=mpi_env(), capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("atoll: error: ")
    assert len(bad.stderr.splitlines()) == 1
    (tmp_path / "a file").write_text("")  # can never become a run: no waiting for it
    bad = subprocess.run(atoll_cmd("watch", str(tmp_path / "a file")), cwd=ROOT,
                         env=mpi_env(), capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stdout == "" and len(bad.stderr.splitlines()) == 1


def test_watch_of_a_job_that_gave_up_says_so_and_what_to_do(tmp_path):
    run_dir = tmp_path / "run"
    gave_up = subprocess.run(
        atoll_cmd("search", *SLOW, "--run-dir", str(run_dir), "-q", "--set",
                  "objective.name=objectives:flaky", "--set", "objective.options.rate=1.0",
                  "--set", "search.give_up_after=3"),
        cwd=ROOT, env=mpi_env(), capture_output=True, text=True, timeout=120)
    assert gave_up.returncode == 70, gave_up.stderr[-2000:]
    done = subprocess.run(atoll_cmd("watch", str(run_dir)), cwd=ROOT, env=mpi_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert progress_lines(done.stdout)[-1].endswith(
        "3 failed, job ended: gave up (exit 70): fix the objective, then resume"), done.stdout


def test_watch_started_before_the_run_exists_waits_for_it_and_follows_its_job(tmp_path):
    run_dir = tmp_path / "pending run"  # a job still pending: nothing there yet
    watch = subprocess.Popen(atoll_cmd("watch", str(run_dir), "--interval", "0.5"), cwd=ROOT,
                             env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        time.sleep(3.0)
        assert watch.poll() is None  # still waiting, not "not an Atoll run"
        search = mpirun_atoll(2, "search", *SLOW, "--run-dir", str(run_dir), "-q", "--set",
                              "search.generations=20", "--set", "objective.options.sleep=0.02")
        out, err = watch.communicate(timeout=60)
    finally:
        if watch.poll() is None:
            watch.kill()
    assert search.returncode == 0 and watch.returncode == 0, err
    assert out.splitlines()[0] == (f"[atoll] waiting for {run_dir} to become an Atoll run (its "
                                   "job has not begun yet); Ctrl-C to stop")
    lines = progress_lines(out)
    assert lines and lines[-1].endswith("job ended") and "40 of 40 done" in lines[-1]


def _default_sigint() -> None:
    """As on a terminal: the suite may run in the background, where SIGINT is ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_watching_without_an_error(tmp_path):
    watch = subprocess.Popen(atoll_cmd("watch", str(tmp_path / "pending run")), cwd=ROOT,
                             env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, preexec_fn=_default_sigint)
    try:
        assert watch.stdout is not None and "Ctrl-C to stop" in watch.stdout.readline()
        watch.send_signal(signal.SIGINT)
        out, err = watch.communicate(timeout=30)
    finally:
        kill_tree(watch)
    assert watch.returncode == 0 and err == "" and out == ""


def test_watch_on_a_terminal_draws_a_live_table_with_verbose_rows_above(tmp_path):
    """On a terminal (a real pseudo-terminal here) watch redraws a rich table in place (control
    sequences) with -v's rows printed above it; in a pipe the same run is plain lines."""
    import os
    import pty

    run_dir = tmp_path / "run"
    assert mpirun_atoll(1, "search", *SLOW, "--run-dir", str(run_dir), "-q", "--set",
                        "search.generations=3").returncode == 0
    leader, follower = pty.openpty()
    watch = subprocess.Popen(atoll_cmd("watch", str(run_dir), "-v"), cwd=ROOT, env=mpi_env(),
                             stdin=subprocess.DEVNULL, stdout=follower, stderr=follower)
    os.close(follower)
    screen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed with the watcher
            break
        if not chunk:
            break
        screen += chunk
    os.close(leader)
    assert watch.wait(timeout=60) == 0, screen[-2000:]
    text = screen.decode()
    assert "\x1b[" in text  # drawn, not printed line by line
    assert "Atoll: job 0" in text and "3 of 3" in text and "job ended" in text
    assert text.count("[atoll] individual ") == 3 and text.index("individual") < text.rindex(
        "Atoll: job 0")
    plain = subprocess.run(atoll_cmd("watch", str(run_dir)), cwd=ROOT, env=mpi_env(),
                           capture_output=True, text=True, timeout=60)
    assert "\x1b" not in plain.stdout and progress_lines(plain.stdout)


def test_the_progress_line_counts_what_the_pruning_rule_paused_and_stopped(tmp_path):
    """Under asha workers are busy with evaluations that pause and spend no budget: the line
    says how many; under halving, how many were stopped; without a rule, neither."""
    counts = {}
    for rule in ("asha", "halving", "none"):
        run_dir = tmp_path / rule
        assert mpirun_atoll(2, "search", "--config", "tests/configs/asha_demo.toml", "--run-dir",
                            str(run_dir), "-q", "--set", "search.evaluations=20", "--set",
                            f"pruning.rule={rule}").returncode == 0
        status = open_run(run_dir).individuals["status"]
        counts[rule] = {what: int(np.count_nonzero(status == int(s)))
                        for what, s in (("paused", Status.PAUSED), ("pruned", Status.PRUNED))}
        done = subprocess.run(atoll_cmd("watch", str(run_dir)), cwd=ROOT, env=mpi_env(),
                              capture_output=True, text=True, timeout=60)
        (last,) = progress_lines(done.stdout)
        for what, count in counts[rule].items():
            assert (f", {count} {what}," in last) == (count > 0), (rule, last)
    assert counts["asha"]["paused"] > 0 and counts["halving"]["pruned"] > 0
    assert counts["none"] == {"paused": 0, "pruned": 0}


TRAINING = re.compile(r", (\d) training \(at epochs? (\d+)(?:-(\d+))?\)")


def test_the_progress_line_shows_the_epochs_of_evaluations_under_way(tmp_path):
    """A long training's epochs reach the files as it trains: before its first result the
    line says how many evaluations are training and which epochs they reached."""
    trace = tmp_path / "trace"
    trace.mkdir()
    done = mpirun_atoll(2, "search", *SLOW, "--run-dir", str(tmp_path / "run"), "--set",
                        "objective.name=objectives:checkpointed", "--set",
                        f"objective.options.trace={json.dumps(str(trace))}", "--set",
                        "objective.options.epochs=25", "--set", "objective.options.sleep=0.1",
                        "--set", "search.generations=1", "--set", "record.flush_interval=0.2",
                        "--progress-interval", "0.5")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = progress_lines(done.stdout)
    seen = [(line, TRAINING.search(line)) for line in lines]
    under_way = [(line, found) for line, found in seen if found]
    assert under_way and not any(" 2 of 2 done" in line for line, _ in under_way), lines
    lowest = [int(found[2]) for _, found in under_way]  # never falls: each epoch only grows
    assert lowest == sorted(lowest) and lowest[-1] > lowest[0], lines  # it moves on
    assert all(1 <= int(found[1]) <= 2 and int(found[2]) <= 24 for _, found in under_way)
    assert lines[-1].endswith("job ended") and not TRAINING.search(lines[-1])


def test_evaluations_under_way_are_epochs_newer_than_their_individuals_last_part():
    """A continued evaluation (a paused one promoted, an interrupted one resumed) has a row of
    its earlier part: its newer epochs are under way; a new one has no row at all."""
    from atoll.record.reader import RunData
    from atoll.space import Space
    from atoll.views.progress import _training

    individuals = np.array([(1, 10.0), (3, 20.0)], dtype=[("id", "i8"), ("finished", "f8")])
    epochs = np.array([(1, 2, 5.0), (1, 3, 12.0), (1, 4, 13.0),  # 1: paused at 10, promoted
                       (2, 0, 11.0),  # 2: no row yet
                       (3, 0, 15.0),  # 3: done at 20
                       (4, 7, 1.0)],  # 4: cut short by a kill in an earlier job
                      dtype=[("individual", "i8"), ("epoch", "i8"), ("time", "f8")])
    run = RunData(individuals=individuals, epochs=epochs, migrations=np.empty(0),
                  jobs=np.empty(0), space=Space.from_dict({"x": {"type": "float", "low": 0,
                                                                 "high": 1}}),
                  config_table={}, metadata={})
    assert _training(run, since=2.0) == (0, 4)
    assert _training(run, since=0.0) == (0, 4, 7)
    assert _training(run, since=14.0) == ()
    # no more than the job's workers: those that reported last (4's row may be unflushed)
    assert _training(run, since=0.0, workers=2) == (0, 4)


def test_this_job_counts_what_ended_in_it_also_when_bred_in_an_earlier_one(tmp_path):
    """An evaluation continued or promoted in a resumed job was bred in an earlier one: it
    counts for the job it ended in, where its rate and ETA come from."""
    from dataclasses import replace

    from atoll.record import WorkerLog, end_job
    from atoll.space import Space
    from atoll.views.progress import take
    from test_record import SPACE, individual, new_run, start_job

    space = Space.from_dict(SPACE)
    paths = new_run(tmp_path, space)
    first = start_job(paths, start=1000.0)
    end_job(paths, first, stop=1100.0, exit_code=75)
    second = start_job(paths, start=2000.0)
    with WorkerLog(paths.worker_file(second, 0), space, job=second, worker=0,
                   flush_interval=60) as log:
        log.add_individual(replace(individual(0), born=1050.0, started=2001.0, finished=2010.0))
        log.add_individual(replace(individual(1), born=2011.0, started=2011.0, finished=2020.0))
    assert take(paths.run_dir).this_job == 2



def test_the_watcher_of_a_short_job_prints_its_lines_though_its_end_comes_while_it_starts(
        tmp_path, capfd):
    """The search sends its watcher SIGTERM when the job ends; a job shorter than the watcher's
    start (a loaded node) sent it before the watcher listened, which killed it silently."""
    from atoll.watcher import start_watcher

    run_dir = tmp_path / "run"
    done = mpirun_atoll(1, "search", *SLOW, "--run-dir", str(run_dir), "--set",
                        "search.generations=5", "-q")
    assert done.returncode == 0, done.stderr[-2000:]
    capfd.readouterr()
    watcher = start_watcher(
        atoll_cmd("watch", str(run_dir), "--plain", "-v", "--interval", "0.5", "--after", "1",
                  "--parent", str(os.getpid())), mpi_env())
    watcher.terminate()  # at once, as a short job's end: the watcher's Python has not started
    assert watcher.wait(timeout=60) == 0
    each = [line for line in capfd.readouterr().out.splitlines()
            if line.startswith("[atoll] individual ")]
    assert sorted(int(line.split()[2]) for line in each) == list(range(5))
