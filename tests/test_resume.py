"""Resume: after a wall-time stop, under other layouts, after kill -9, and its refusals."""

from __future__ import annotations

import hashlib
import json
import math
import random
import subprocess
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from atoll.engine.restore import completed_count
from atoll.individual import Status
from atoll.record import RunPaths, end_job, open_run, read_history
from atoll.record.run import begin_job
from conftest import ROOT, atoll_cmd, kill_tree, mpi_env, mpirun_atoll, mpirun_cmd, run

SLOW_CONFIG = "tests/configs/slow_sphere.toml"


def start(tmp_path: Path, ranks: int, *settings: str, name: str = "run",
          config: str = SLOW_CONFIG) -> tuple[Path, subprocess.CompletedProcess[str]]:
    run_dir = tmp_path / name
    args = ["search", "--config", config, "--run-dir", str(run_dir)]
    for item in settings:
        args += ["--set", item]
    return run_dir, mpirun_atoll(ranks, *args)


def resume(run_dir: Path, ranks: int, *settings: str) -> subprocess.CompletedProcess[str]:
    args = ["resume", str(run_dir)]
    for item in settings:
        args += ["--set", item]
    return mpirun_atoll(ranks, *args)


def check_complete(run_dir: Path, budget: int) -> np.ndarray:
    ind = open_run(run_dir).individuals
    assert completed_count(ind) == budget
    assert len(np.unique(ind["id"])) == len(ind)
    return ind


def digest(run_dir: Path) -> dict[str, str]:
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_resume_after_wall_time_under_other_layouts(tmp_path):
    # the GA: its children name parents, which the test follows across the resumes
    run_dir, done = start(tmp_path, 4, "search.generations=150", "search.islands=2",
                          "search.wall_time=1.5", "migration.probability=0.5",
                          "evolution.strategy=ga")
    assert done.returncode == 75, done.stderr[-2000:]  # stopped by the wall time: resume
    first = completed_count(open_run(run_dir).individuals)
    assert 0 < first < 600
    # A smaller allocation with one island, then a larger one with 2-rank workers.
    done = resume(run_dir, 2, "search.islands=1", "search.wall_time=1.5")
    assert done.returncode == 75, done.stderr[-2000:]
    second = completed_count(open_run(run_dir).individuals)
    assert first < second < 600
    # The run's wall_time (1.5 s, per job) holds unless a job overrides it.
    done = resume(run_dir, 6, "search.ranks_per_worker=2", "search.islands=3",
                  "search.wall_time=0")
    assert done.returncode == 0, done.stderr[-2000:]
    ind = check_complete(run_dir, 600)
    run = open_run(run_dir)
    layouts = [row["layout"] for row in run.jobs]
    assert len(layouts) == 3 and json.loads(layouts[2])["islands"] == 3
    assert set(ind["worker"][ind["born"] > run.jobs["start"][2]]) <= {0, 1, 2}
    # Later jobs bred from what earlier jobs found: some parents come from an earlier job.
    later = ind[ind["born"] > run.jobs["start"][1]]
    earlier_ids = set(ind["id"][ind["born"] < run.jobs["start"][1]])
    assert {int(p) for p in later["parent_a"]} & earlier_ids


def test_a_finished_run_resumes_to_nothing_until_its_budget_is_raised(tmp_path):
    run_dir, done = start(tmp_path, 2, "search.generations=10")
    assert done.returncode == 0, done.stderr[-2000:]
    before = digest(run_dir)
    done = resume(run_dir, 2)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "No job ran: the run's budget is spent" in done.stdout
    assert done.stderr.count("the run's budget is spent (20 of 20 evaluations)") == 1
    assert digest(run_dir) == before  # no job row, no files
    done = resume(run_dir, 2, "search.evaluations=10")  # below what it holds: said so
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count("the run's budget is spent (it holds 20 evaluations, more than the "
                             "10 asked for): no job was started; to go on, raise it above 20 "
                             "with 'atoll resume") == 1, done.stderr
    assert digest(run_dir) == before
    # A larger total budget extends it, under another layout; later resumes keep it.
    done = resume(run_dir, 4, "search.evaluations=30")
    assert done.returncode == 0, done.stderr[-2000:]
    check_complete(run_dir, 30)
    run = open_run(run_dir)
    assert len(run.jobs) == 2 and run.metadata["budget"] == 30
    assert "budget: 30 of 30 completed" in done.stdout
    done = resume(run_dir, 2)
    assert done.returncode == 0 and "No job ran" in done.stdout


def test_a_total_budget_is_the_same_under_any_layout(tmp_path):
    for ranks in (1, 3):
        run_dir, done = start(tmp_path, ranks, "search.evaluations=7", name=f"r{ranks}")
        assert done.returncode == 0, done.stderr[-2000:]
        check_complete(run_dir, 7)
        assert open_run(run_dir).metadata["budget"] == 7


def test_search_on_an_existing_run_of_the_same_search_continues_it(tmp_path):
    run_dir, done = start(tmp_path, 2, "search.generations=100", "search.wall_time=1")
    assert done.returncode == 75
    run_dir, done = start(tmp_path, 2, "search.generations=100", "search.wall_time=0")
    assert done.returncode == 0, done.stderr[-2000:]
    check_complete(run_dir, 200)


@pytest.mark.slow
def test_kill_9_at_random_moments_loses_only_unflushed_work_and_resumes_exactly(tmp_path):
    rng = random.Random(1234)
    budget = 4 * 150
    partial = []
    run_dir = tmp_path / "killed"
    args = ["search", "--config", SLOW_CONFIG, "--run-dir", str(run_dir),
            "--set", "search.generations=150", "--set", "search.islands=2",
            "--set", "record.flush_interval=0.05", "--set", "migration.probability=0.3"]
    for moment in (rng.uniform(0.1, 1.5) for _ in range(3)):
        cmd = mpirun_cmd(4, "-m", "atoll", *args) if not (run_dir / "run.h5").exists() else \
            mpirun_cmd(4, "-m", "atoll", "resume", str(run_dir), "--set",
                       "record.flush_interval=0.05")
        proc = subprocess.Popen(cmd, cwd=ROOT, env=mpi_env(), start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        files = len(list(run_dir.glob("workers/*.h5")))
        deadline = time.monotonic() + 60  # wait for this job's search to start, then kill
        while time.monotonic() < deadline and len(list(run_dir.glob("workers/*.h5"))) == files:
            time.sleep(0.05)
        time.sleep(moment)
        kill_tree(proc)
        if not (run_dir / "run.h5").exists():
            continue
        # Every file opens, and every recorded row is whole.
        for path in run_dir.rglob("*.h5"):
            with h5py.File(path, "r", locking=False, swmr=True):
                pass
        ind = open_run(run_dir).individuals
        assert len(np.unique(ind["id"])) == len(ind)
        assert (ind["status"] == int(Status.OK)).all()
        assert np.isfinite(ind["loss"]).all()
        partial.append(completed_count(ind))
    assert any(0 < n < budget for n in partial), partial  # the kills hit running searches
    done = mpirun_atoll(3, "resume", str(run_dir), "--set", "search.islands=3") \
        if (run_dir / "run.h5").exists() else mpirun_atoll(4, *args)
    assert done.returncode == 0, done.stderr[-2000:]
    check_complete(run_dir, budget)


def test_search_refuses_a_run_of_a_different_space_and_changes_nothing(tmp_path):
    run_dir, done = start(tmp_path, 1, "search.generations=5")
    assert done.returncode == 0
    before = digest(run_dir)
    for extra in (["--set", "space.x1.low=-1"], ["--set", "space.x0.high=1"]):
        done = run(atoll_cmd("search", "--config", SLOW_CONFIG, "--run-dir", str(run_dir),
                             *extra))
        assert done.returncode == 2
        assert "search space differs" in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    done = run(atoll_cmd("search", "--config", SLOW_CONFIG, "--run-dir", str(run_dir),
                         "--set", "search.generations=6"))
    assert done.returncode == 2 and "search.generations = 5, not 6" in done.stderr
    assert digest(run_dir) == before


def test_resume_refuses_damaged_newer_and_foreign_runs_without_changing_them(tmp_path):
    run_dir, done = start(tmp_path, 1, "search.generations=5")
    assert done.returncode == 0
    cases = []
    newer = tmp_path / "newer"
    subprocess.run(["cp", "-r", str(run_dir), str(newer)], check=True)
    with h5py.File(newer / "run.h5", "r+") as f:
        f.attrs["schema_version"] = 99
    cases.append((newer, "schema"))
    damaged = tmp_path / "damaged"
    subprocess.run(["cp", "-r", str(run_dir), str(damaged)], check=True)
    data = (damaged / "run.h5").read_bytes()
    (damaged / "run.h5").write_bytes(data[: len(data) // 3])
    cases.append((damaged, "damaged"))
    worker = tmp_path / "worker"
    subprocess.run(["cp", "-r", str(run_dir), str(worker)], check=True)
    (worker / "workers" / "job000-worker00000.h5").write_bytes(b"not hdf5 at all")
    cases.append((worker, "job000-worker00000.h5"))
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    cases.append((foreign, "not an Atoll run"))
    for path, words in cases:
        before = digest(path)
        done = run(atoll_cmd("resume", str(path)))
        assert done.returncode == 2, (path, done.stderr)
        assert words in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert digest(path) == before


def _in_a_silent_second_evaluation(tmp_path: Path, flush_interval: float
                                   ) -> tuple[Path, Path, subprocess.Popen[bytes]]:
    """A search of one worker whose first evaluation completes (one epoch, checkpointed) and
    whose second reports nothing until ``trace``/go exists; returns once the second began."""
    trace = tmp_path / "trace"
    trace.mkdir()
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        atoll_cmd("search", "--config", SLOW_CONFIG, "--run-dir", str(run_dir),
                  "--set", "objective.name=objectives:quick_then_still",
                  "--set", f"objective.options.trace={json.dumps(str(trace))}",
                  "--set", "objective.options.epochs=1", "--set", "objective.options.sleep=0",
                  "--set", "search.generations=4",
                  "--set", f"record.flush_interval={flush_interval}"),
        cwd=ROOT, env=mpi_env(), start_new_session=True, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (trace / "still-1").exists():
        time.sleep(0.05)
    if not (trace / "still-1").exists():
        kill_tree(proc)
        raise AssertionError("the second evaluation never began")
    return run_dir, trace, proc


def test_a_finished_evaluations_checkpoint_outlives_it_until_its_row_is_written(tmp_path):
    """kill -9 while the record still holds the row of a completed evaluation in memory (the
    next evaluation reports no epoch, so nothing flushes): its checkpoint is still there, and
    the next job continues it from there instead of losing it without a word."""
    run_dir, trace, proc = _in_a_silent_second_evaluation(tmp_path, flush_interval=60)
    kill_tree(proc)
    assert (trace / "0.txt").read_text().split() == ["0"]  # 0 completed before the kill
    assert 0 not in open_run(run_dir).individuals["id"].tolist()  # its row never reached disk
    assert RunPaths(run_dir).checkpoint_file(0).exists()
    (trace / "go").touch()
    done = run(atoll_cmd("resume", str(run_dir)), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "continuing 1 interrupted evaluation(s), each where it ran if this layout has its " \
        "worker, under their ids: 0" in done.stderr
    ind = check_complete(run_dir, 4)
    assert ind[ind["id"] == 0]["loss"].tolist() == [1.0]  # its one epoch, from the checkpoint
    assert (trace / "0.txt").read_text().split() == ["0"]  # and not trained again


def test_a_finished_evaluations_row_is_written_while_the_next_one_reports_nothing(tmp_path):
    """The row of a completed evaluation reaches the file within about
    ``record.flush_interval`` seconds although the next evaluation reports no epoch (which
    would flush it), so a kill -9 meanwhile loses only the evaluation in flight."""
    run_dir, trace, proc = _in_a_silent_second_evaluation(tmp_path, flush_interval=0.5)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and 0 not in open_run(run_dir).individuals["id"]:
            time.sleep(0.2)
    finally:
        kill_tree(proc)
    assert not (trace / "go").exists()  # the second evaluation was still running
    row = open_run(run_dir).individuals
    assert row["id"].tolist() == [0] and row["loss"].tolist() == [1.0]
    assert RunPaths(run_dir).checkpoint_file(0).exists()  # the kill came before it could go
    (trace / "go").touch()
    done = run(atoll_cmd("resume", str(run_dir)), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "continuing" not in done.stderr  # 0 was done; 1 had no checkpoint: bred again
    assert not RunPaths(run_dir).checkpoint_file(0).exists()  # nothing wanted it any more
    ind = check_complete(run_dir, 4)
    assert ind[ind["id"] == 0]["loss"].tolist() == [1.0]
    assert (trace / "0.txt").read_text().split() == ["0"]  # 0 trained once


def test_a_missing_worker_file_is_said_by_inspect_and_resume(tmp_path):
    """A worker file lost in a copy: its rows are not in the record, said in one line rather
    than a smaller run shown (and resumed) as if whole."""
    run_dir, done = start(tmp_path, 3, "search.generations=4")
    assert done.returncode == 0, done.stderr[-2000:]
    lost = RunPaths(run_dir).worker_file(0, 1)
    lost.unlink()
    RunPaths(run_dir).results_file.unlink()
    line = (f"1 worker file(s) of the run's jobs are missing ({lost}, for one): their rows, if "
            "any, are not in the record; restore them from a backup")
    shown = run(atoll_cmd("inspect", str(run_dir)))
    assert shown.returncode == 0 and f"Warning: {line}" in shown.stdout, shown.stdout
    done = resume(run_dir, 3, "search.evaluations=16")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count(line) == 1, done.stderr


def test_a_job_killed_before_it_made_its_worker_files_is_said_as_such(tmp_path):
    """kill -9 between a job's start (its row in run.h5) and its worker files' creation
    leaves a job with none: said as what it is, not as files lost that a backup would hold."""
    run_dir, done = start(tmp_path, 3, "search.generations=4")
    assert done.returncode == 0, done.stderr[-2000:]
    paths = RunPaths(run_dir)
    layout = json.loads(open_run(run_dir).jobs["layout"][0])
    begin_job(paths, layout=layout, hosts=["here"], versions={}, slurm={}, start=time.time())
    line = ("job(s) 1 never ended and have none of their worker files: killed before they made "
            "them, they recorded nothing (or starting now; if their files were moved away, "
            f"restore them to {paths.workers_dir})")
    shown = run(atoll_cmd("inspect", str(run_dir)))
    assert shown.returncode == 0 and f"Warning: {line}" in shown.stdout, shown.stdout
    assert "backup" not in shown.stdout
    done = resume(run_dir, 3, "search.evaluations=16")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count(line) == 1 and "backup" not in done.stderr, done.stderr
    check_complete(run_dir, 16)


def test_resume_may_change_only_job_level_settings(tmp_path):
    run_dir, done = start(tmp_path, 1, "search.generations=5")
    assert done.returncode == 0
    done = run(atoll_cmd("resume", str(run_dir), "--set", "evolution.mutation=0.9"))
    assert done.returncode == 2 and "a resume may change only" in done.stderr


def test_interrupted_evaluations_are_continued_under_their_ids_and_counted_once(tmp_path):
    """A wall-time stop interrupts the evaluations in flight; the next job (another layout)
    evaluates those individuals again, same ids and parameters, before breeding new ones."""
    run_dir, done = start(tmp_path, 2, "objective.options.sleep=0.4", "search.generations=10",
                          "search.wall_time=1.0")
    assert done.returncode == 75, done.stderr[-2000:]
    first = open_run(run_dir).individuals
    interrupted = first[first["status"] == int(Status.INTERRUPTED)]
    assert len(interrupted) >= 1
    done = resume(run_dir, 3, "search.wall_time=0")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "continuing" in done.stderr and str(int(interrupted["id"][0])) in done.stderr
    ind = check_complete(run_dir, 20)  # one row per id, the budget counted once
    assert not (ind["status"] == int(Status.INTERRUPTED)).any()
    for row in interrupted:
        again = ind[ind["id"] == row["id"]][0]
        assert (again["x0"], again["x1"]) == (row["x0"], row["x1"])
        assert again["status"] == int(Status.OK) and again["born"] == row["born"]
    parts = read_history(run_dir, 2)[0]  # every part: the interrupted rows are kept
    assert len(parts) == len(ind) + len(interrupted)
    new = set(ind["id"].tolist()) - set(first["id"].tolist())
    after = int(first["id"].max()) + 1  # job 0 ended: new ids number on after its last one
    assert json.loads(open_run(run_dir).jobs["layout"][1])["ids"][0] == after
    assert after <= min(new) < after + 3  # 3 workers, each every 3rd id; continued keep theirs


CHOICES = ('space.act={type = "categorical", choices = ["relu", "tanh"]}',
           'space.width={type = "ordinal", values = [16, 32, 64]}')
"""Parameters that are not floats: an interrupted individual is continued with them as given."""


def test_an_interrupted_evaluation_continues_from_its_checkpoint_under_another_layout(tmp_path):
    """A wall-time stop in mid-training: the next job (3 ranks instead of 2) gives each
    interrupted individual its last checkpoint (and its parameters, strings too), so every
    epoch is trained once; the checkpoints of completed evaluations are deleted."""
    trace = tmp_path / "trace"
    trace.mkdir()
    run_dir, done = start(tmp_path, 2, "objective.name=objectives:checkpointed",
                          f"objective.options.trace={json.dumps(str(trace))}",
                          "objective.options.sleep=0.15", "search.generations=4",
                          "search.wall_time=1.2", *CHOICES)
    assert done.returncode == 75, done.stderr[-2000:]
    first = open_run(run_dir).individuals
    interrupted = first["id"][first["status"] == int(Status.INTERRUPTED)].tolist()
    assert interrupted
    kept = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert kept == [f"ind{i:012d}.h5" for i in sorted(interrupted)]
    done = resume(run_dir, 3, "search.wall_time=0")
    assert done.returncode == 0, done.stderr[-2000:]
    ind = check_complete(run_dir, 8)
    assert (ind["status"] == int(Status.OK)).all() and (ind["loss"] == 6.0).all()
    for ident in ind["id"].tolist():
        epochs = [int(e) for e in (trace / f"{ident}.txt").read_text().split()]
        assert epochs == list(range(6)), (ident, epochs)  # none trained twice or lost
    assert not list((run_dir / "checkpoints").iterdir())
    by_id = {row["id"]: (row["act"], row["width"]) for row in first[first["status"] == int(
        Status.INTERRUPTED)]}
    assert {row["id"]: (row["act"], row["width"]) for row in ind if row["id"] in by_id} == by_id


def stopped_early(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A job stopped by its wall time before it gave all the ids of its block; its ids."""
    run_dir, done = start(tmp_path, 2, "search.generations=5", "search.wall_time=3",
                          "objective.options.sleep=0.8")
    assert done.returncode == 75, done.stderr[-2000:]
    first = open_run(run_dir)
    block = json.loads(first.jobs["layout"][0])["ids"]
    assert block == [0, 20]  # 2 workers, each of which may give the island's 10 new ids
    assert int(first.individuals["id"].max(initial=0)) < 10 - 2  # stopped before its end
    return run_dir, first.individuals["id"]


def test_a_job_that_never_ended_keeps_its_id_block_from_later_jobs(tmp_path):
    """Each job records the ids it may give new individuals; a later job starts after the block
    of every earlier job whose end is not recorded, so a job that was taken over while alive
    (a hang, a suspend) and writes its last rows afterwards can never give an id twice."""
    run_dir, first = stopped_early(tmp_path)
    end_job(RunPaths(run_dir), 0, stop=math.nan, exit_code=-1)  # as a kill would leave it
    done = resume(run_dir, 2, "search.wall_time=0")
    assert done.returncode == 0, done.stderr[-2000:]
    ind = check_complete(run_dir, 10)
    new = set(ind["id"].tolist()) - set(first.tolist())
    assert min(new) >= 20  # after job 0's whole block, not after its last recorded id
    assert json.loads(open_run(run_dir).jobs["layout"][1])["ids"][0] == 20
    shown = run(atoll_cmd("inspect", str(run_dir)))
    assert "new ids 0-19" in shown.stdout and "new ids 20-" in shown.stdout


def test_after_a_job_that_ended_the_next_ids_follow_its_last(tmp_path):
    """A job whose end is recorded wrote all its rows: the ids of its block it did not give are
    free again, so the run's ids stay dense across resumes."""
    run_dir, first = stopped_early(tmp_path)
    done = resume(run_dir, 2, "search.wall_time=0")
    assert done.returncode == 0, done.stderr[-2000:]
    ind = check_complete(run_dir, 10)
    after = int(first.max()) + 1
    assert json.loads(open_run(run_dir).jobs["layout"][1])["ids"][0] == after
    new = set(ind["id"].tolist()) - set(first.tolist())
    assert after <= min(new) < after + 2  # each worker takes every 2nd id from there


def test_an_evaluation_a_kill_9_cut_short_continues_from_its_checkpoint(tmp_path):
    """kill -9 of the whole job in mid-training: the evaluations in flight have no row, only
    their checkpoints (which keep the individual) and the epoch rows the checkpoints hold; the
    next job continues them under their ids, with at most the one epoch redone that the kill
    cut short, and the record has each one's whole curve."""
    trace = tmp_path / "trace"
    trace.mkdir()
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        mpirun_cmd(2, "-m", "atoll", "search", "--config", SLOW_CONFIG, "--run-dir",
                   str(run_dir), "--set", "objective.name=objectives:checkpointed",
                   "--set", f"objective.options.trace={json.dumps(str(trace))}",
                   "--set", "objective.options.sleep=0.3", "--set", "search.generations=3",
                   "--set", "record.flush_interval=0.2"),
        cwd=ROOT, env=mpi_env(), start_new_session=True, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(list(trace.glob("*.txt"))) < 3:
            time.sleep(0.05)  # the second evaluation of some worker is under way
        time.sleep(0.5)
        kill_tree(proc)
    finally:
        kill_tree(proc)
    recorded = set(open_run(run_dir).individuals["id"].tolist())
    cut_short = {int(p.stem[3:]) for p in (run_dir / "checkpoints").glob("ind*.h5")} - recorded
    assert cut_short, "no evaluation was in flight with a checkpoint at the kill"
    rows = open_run(run_dir).epochs
    for ident in cut_short:  # the epochs its checkpoint holds are in the record
        mine = sorted(rows["epoch"][rows["individual"] == ident].tolist())
        assert mine and mine == list(range(len(mine))), (ident, mine)
    # inspect and the report show them as evaluations with no result yet
    ahead = ~np.isin(rows["individual"], list(recorded))
    shown = run(atoll_cmd("inspect", str(run_dir))).stdout
    assert (f"Epochs: {len(rows)} ({np.count_nonzero(ahead)} of them from "
            f"{len(set(rows['individual'][ahead].tolist()))} "
            "evaluation(s) with no result yet: running, or cut short by a kill)") in shown, shown
    from atoll.views.plots.curves import intermediate_figure

    drawn = [c for c in intermediate_figure(open_run(run_dir)).axes[0].collections
             if c.get_label().startswith("no result yet")]
    assert len(drawn[0].get_segments()) == len(np.unique(rows["individual"][ahead]))
    done = resume(run_dir, 2)
    assert done.returncode == 0, done.stderr[-2000:]
    ind = check_complete(run_dir, 6)
    assert cut_short <= set(ind["id"].tolist())
    assert (ind["status"] == int(Status.OK)).all() and (ind["loss"] == 6.0).all()
    rows = open_run(run_dir).epochs
    for ident in cut_short:
        epochs = [int(e) for e in (trace / f"{ident}.txt").read_text().split()]
        assert sorted(set(epochs)) == list(range(6)) and len(epochs) <= 7, (ident, epochs)
        recorded = rows["epoch"][rows["individual"] == ident].tolist()
        assert sorted(recorded) == list(range(6)), (ident, recorded)  # its whole curve
    assert not list((run_dir / "checkpoints").glob("ind*.h5"))
