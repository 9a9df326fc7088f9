"""``atoll doctor``: the preflight table and its exit code, under real mpirun (1 and 4 ranks)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from atoll.errors import ranks_text
from atoll.exit_codes import EXIT_BAD_INPUT
from atoll.job.doctor_checks import (
    FAIL,
    OK,
    WARN,
    Row,
    command_gpu_rows,
    gpu_rows,
    lock_rows,
    paused_checkpoint_rows,
    render,
    space_rows,
)
from atoll.objectives.launch_env import torchrun_crowding
from conftest import MPIRUN, ROOT, atoll_cmd, mpi_env, mpirun_cmd, run

SPHERE = str(ROOT / "examples" / "sphere.toml")


def flat(out: str) -> str:
    """The output with wrapped lines joined (details wrap under themselves)."""
    return " ".join(out.split())


def rows_of(out: str) -> dict[str, list[str]]:
    """check name -> the statuses of its rows, read back from the printed table."""
    found: dict[str, list[str]] = {}
    body = out.split("------\n", 1)[-1] if "------" in out else out
    for line in body.splitlines()[1:]:
        for status in (OK, WARN, FAIL, "skip"):
            marker = f"  {status:<6}  "
            if marker in line and not line.startswith(" "):
                found.setdefault(line.split(marker)[0].strip(), []).append(status)
    return found


def test_one_rank_ready_and_leaves_nothing_behind(tmp_path):
    run_dir = tmp_path / "runs" / "sphere"
    done = run(atoll_cmd("doctor", "--config", SPHERE, "--run-dir", str(run_dir),
                         "--set", "search.islands=1"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = rows_of(done.stdout)
    assert rows["layout"] == [OK] and rows["HDF5 locking"] == [OK], done.stdout
    assert "1 worker(s) of 1 rank(s), 1 island(s); leaders: ranks 0" in flat(done.stdout)
    assert "gloo: 1 worker group(s) built in" in flat(done.stdout)
    assert "a second open from another process on this host was refused" in flat(done.stdout)
    assert "ready (" in flat(done.stdout) and "exit 0" in done.stdout
    assert list(tmp_path.iterdir()) == []  # nothing created: not the run dir, no probe file


@pytest.mark.parametrize(("config", "said"), [
    (SPHERE, "sphere: imported on every rank; it has no preflight"),
    (str(ROOT / "examples" / "command.toml"),
     "command: set up on every rank; its preflight passed"),
])
def test_the_objective_row_says_what_was_checked(config, said):
    done = run(atoll_cmd("doctor", "--config", config, "--set", "search.ranks_per_worker=1",
                         "--set", "search.islands=1"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert rows_of(done.stdout)["objective"] == [OK]
    assert said in flat(done.stdout), done.stdout


def test_one_rank_bad_layout_exits_2_and_islands_lowered_to_fit_are_a_warning():
    done = run(atoll_cmd("doctor", "--config", SPHERE, "--set", "search.ranks_per_worker=2"))
    assert done.returncode == 2
    assert rows_of(done.stdout)["layout"] == [FAIL]
    assert "1 MPI rank cannot form workers of ranks_per_worker=2" in flat(done.stdout)
    assert "the search would fail here (exit 2)" in flat(done.stdout)
    assert rows_of(done.stdout)["run directory"] == ["skip"]


def test_help_example_four_ranks_two_per_worker(tmp_path):
    # the example of `atoll doctor --help` and the README, as written (with mpirun's test flags)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    done = run(mpirun_cmd(4, "-m", "atoll", "doctor", "--config", "examples/sphere.toml",
                          "--run-dir", "runs/sphere", "--set", "search.ranks_per_worker=2"),
               cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("atoll doctor: 4 rank(s)") == 1  # rank 0 prints, once
    rows = rows_of(done.stdout)
    assert rows["process group"] == [OK] and rows["disk space"] == [OK], done.stdout
    assert "2 worker(s) of 2 rank(s), 2 island(s); leaders: ranks 0, 2" in flat(done.stdout)
    assert "gloo: 2 worker group(s) built in" in flat(done.stdout)
    assert "300 evaluations (150 per worker x 2 workers)" in flat(done.stdout)
    assert [p.name for p in tmp_path.iterdir()] == ["examples"]  # no run dir, no probe file


def test_a_command_search_shows_each_workers_gpus_and_grants_shared_out_are_no_warning():
    """The job's 4 GPUs on every rank (--gres=gpu:4, 4 tasks): each worker's commands see its
    2, and nothing says the ranks would share one."""
    done = run(mpirun_cmd(4, "-m", "atoll", "doctor", "--config",
                          str(ROOT / "examples" / "command.toml")),
               env=mpi_env(CUDA_VISIBLE_DEVICES="GPU-a,GPU-b,GPU-c,GPU-d"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert rows_of(done.stdout)["command GPUs"] == [OK], done.stdout
    host = socket.gethostname()
    assert (f"worker 0 on {host}: GPU-a,GPU-b; worker 1 on {host}: GPU-c,GPU-d"
            in flat(done.stdout)), done.stdout
    assert "would share" not in flat(done.stdout)


def test_four_ranks_every_failure_is_reported_and_every_rank_exits_2(tmp_path):
    # no CUDA here, so nccl fails each worker's group; a budget no disk can hold fails the
    # space check. Both are found in one run, and mpirun (every rank) exits 2.
    done = run(mpirun_cmd(4, "-m", "atoll", "doctor", "--config", SPHERE, "--run-dir",
                          str(tmp_path / "r"), "--set", "search.ranks_per_worker=2",
                          "--set", "distributed.backend=nccl",
                          "--set", "search.generations=400000000000"))
    assert done.returncode == 2, done.stdout + done.stderr
    rows = rows_of(done.stdout)
    assert rows["process group"] == [FAIL, FAIL], done.stdout
    assert "needs CUDA devices and this rank sees none" in flat(done.stdout)
    assert rows["disk space"] == [FAIL] and "free some space" in flat(done.stdout)
    assert "3 check(s) failed: the search would fail here (exit 2)" in flat(done.stdout)


def test_one_worker_failing_alone_fails_the_whole_job(tmp_path):
    # MPMD: ranks 2-3 (worker 1) are told to use nccl, ranks 0-1 (worker 0) gloo. Only worker
    # 1 fails; rank 0 reports it, and every rank exits 2 (nothing hangs).
    args = ["-m", "atoll", "doctor", "--config", SPHERE, "--set", "search.ranks_per_worker=2"]
    cmd = [str(MPIRUN), "--oversubscribe", "--bind-to", "none",
           "-n", "2", sys.executable, *args, ":",
           "-n", "2", sys.executable, *args, "--set", "distributed.backend=nccl"]
    done = run(cmd, env=mpi_env())
    assert done.returncode == 2, done.stdout + done.stderr
    assert "worker 1 (ranks 2-3): DistributedError" in flat(done.stdout)
    assert "gloo: 1 worker group(s) built" in flat(done.stdout)  # worker 0 was fine


def test_locking_off_by_environment_is_reported(tmp_path):
    env = mpi_env(HDF5_USE_FILE_LOCKING="FALSE")
    done = run(atoll_cmd("doctor", "--config", SPHERE, "--set", "search.islands=1",
                         "--run-dir", str(tmp_path)), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "off (HDF5_USE_FILE_LOCKING=FALSE)" in flat(done.stdout)


def test_bad_input_is_one_line():
    done = run(atoll_cmd("doctor", "--set", "search.islands=0"))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "atoll: error: search.islands: expected an integer >= 1, got 0\n"


# --- doctor fails where the search refuses to start, with the search's own line ------------

def refusal(stderr: str) -> str:
    """The line after "atoll: error: " (or the search's warning prefix) on stderr."""
    for line in stderr.splitlines():
        for prefix in ("atoll: error: ", "WARNING atoll.job.runner: "):
            if prefix in line:
                return line.split(prefix, 1)[1]
    return ""


def test_an_objective_that_does_not_import_fails_on_every_rank_with_the_search_line(tmp_path):
    (tmp_path / "broken_objective.py").write_text("import no_such_package_here\n"
                                                  "def objective(params, ctx):\n    return 0.0\n")
    (tmp_path / "broken.toml").write_text(
        '[objective]\nname = "broken_objective:objective"\n[search]\nislands = 1\n'
        '[space.x]\ntype = "float"\nlow = 0.0\nhigh = 1.0\n')
    args = ["--config", str(tmp_path / "broken.toml"), "--run-dir", str(tmp_path / "r")]
    search = run(mpirun_cmd(2, "-m", "atoll", "search", *args), cwd=tmp_path)
    doctor = run(mpirun_cmd(2, "-m", "atoll", "doctor", *args), cwd=tmp_path)
    assert search.returncode == 2 and "no_such_package_here" in refusal(search.stderr)
    assert doctor.returncode == 2, doctor.stdout + doctor.stderr
    assert refusal(doctor.stderr) == refusal(search.stderr)
    assert rows_of(doctor.stdout)["objective"] == [FAIL]
    assert not (tmp_path / "r").exists()


@pytest.mark.slow  # a search and three doctors under mpirun
def test_a_different_search_fails_with_the_search_line_and_a_spent_budget_warns(tmp_path):
    """A search on a run whose budget is spent starts no job and exits 0: the doctor warns
    with its line (saying what a search would do) instead of predicting a failure."""
    run_dir = str(tmp_path / "r")
    base = ["--config", SPHERE, "--run-dir", run_dir, "--set", "search.islands=1",
            "--set", "search.generations=6"]
    assert run(atoll_cmd("search", *base, "-q")).returncode == 0
    ready = run(atoll_cmd("doctor", *base, "--set", "search.evaluations=10"))
    assert ready.returncode == 0, ready.stdout + ready.stderr  # a larger budget extends it
    assert "6 of 10 evaluations done: 4 left for this job" in flat(ready.stdout)

    other = [*base, "--set", "seed=2"]
    search = run(atoll_cmd("search", *other, "-q"))
    doctor = run(atoll_cmd("doctor", *other))
    assert search.returncode == 2 and "holds a run with seed = 1, not 2" in search.stderr
    assert doctor.returncode == 2 and refusal(doctor.stderr) == refusal(search.stderr)
    assert rows_of(doctor.stdout)["run directory"] == [FAIL]

    search = run(atoll_cmd("search", *base, "-q"))
    doctor = run(atoll_cmd("doctor", *base))
    assert search.returncode == 0 and "the run's budget is spent (6 of 6" in search.stderr
    assert "no job was started; extend it with" in search.stderr
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert rows_of(doctor.stdout)["budget"] == [WARN]
    assert (f"{run_dir}: the run's budget is spent (6 of 6 evaluations): a search here starts "
            "no job (exit 0); extend it with") in flat(doctor.stdout)
    assert "would fail" not in doctor.stdout + doctor.stderr


def test_a_run_directory_another_job_holds_fails_with_the_search_line(tmp_path):
    """A live search holds the run directory: the doctor fails with the line a second search
    refuses with, instead of saying "ready"; a claim of a job on another host is a warning
    (a search waits for it to go stale)."""
    run_dir = tmp_path / "r"
    base = ["--config", SPHERE, "--run-dir", str(run_dir), "--set", "search.islands=1",
            "--set", "search.generations=100000"]
    holder = subprocess.Popen(atoll_cmd("search", *base, "-q"), cwd=ROOT, env=mpi_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (run_dir / "run.h5").exists():
            time.sleep(0.1)
        doctor = run(atoll_cmd("doctor", *base))
        search = run(atoll_cmd("search", *base, "-q"))
    finally:
        holder.kill()
        holder.wait()
    assert search.returncode == 2 and "a job holds this run directory" in search.stderr
    assert doctor.returncode == 2, doctor.stdout + doctor.stderr
    assert refusal(doctor.stderr) == refusal(search.stderr)
    assert rows_of(doctor.stdout)["run directory"] == [FAIL]

    (run_dir / ".atoll-claim").write_text(json.dumps(
        {"host": "another-node", "pid": 1, "slurm_job": "7", "since": time.time()}))
    doctor = run(atoll_cmd("doctor", *base))
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert rows_of(doctor.stdout)["run directory"] == [WARN, OK]
    assert "held by a job on another host (host another-node, pid 1, SLURM job 7" in \
        flat(doctor.stdout)


# --- the pure checks, on facts no machine here can show (GPUs) -----------------------------

def view(rank, node, device, uuid=None, visible=None, name="NVIDIA A100-SXM4-40GB"):
    return {"rank": rank, "node": node, "device": device, "uuid": uuid, "visible": visible,
            "count": 4, "name": name}


def test_two_ranks_of_one_node_on_one_gpu_is_an_error():
    rows = gpu_rows([view(0, "n1", 0, "GPU-a"), view(1, "n1", 1, "GPU-a"),
                     view(2, "n2", 0, "GPU-c"), view(3, "n2", 1, "GPU-d")])
    assert [r.status for r in rows] == [FAIL, WARN]
    assert rows[0].detail.startswith("ranks 0-1 on n1 share GPU GPU-a")


def test_one_gpu_per_rank_is_fine_and_shows_the_mapping():
    # per-task binding: every rank sees its own GPU as cuda:0 (different UUIDs)
    rows = gpu_rows([view(0, "n1", 0, "GPU-a", "0"), view(1, "n1", 0, "GPU-b", "1")])
    assert [r.status for r in rows] == [OK]
    assert "n1: 0->cuda:0, 1->cuda:0" in rows[0].detail and "A100" in rows[0].detail


def test_without_uuids_the_visible_list_names_the_gpu():
    rows = gpu_rows([view(0, "n1", 0, None, "2,3"), view(1, "n1", 0, None, "2,3")])
    assert rows[0].status == FAIL and "share GPU 2" in rows[0].detail


def test_granted_gpus_torch_cannot_see_are_a_warning():
    rows = gpu_rows([{**view(0, "n1", None, visible="0,1"), "count": 0}])
    assert rows[0].status == WARN and "CPU run" in rows[0].detail


def test_ranks_slurm_granted_no_gpu_are_a_plain_cpu_run():
    """Slurm writes ``NoDevFiles`` for "no GPU granted": no grant to warn about, nor a GPU that
    ranks would share."""
    rows = gpu_rows([{**view(r, "n1", None, visible="NoDevFiles"), "count": 0} for r in (0, 1)])
    assert [(r.status, r.detail) for r in rows] == [(OK, "none visible: a CPU run (gloo)")]


def test_two_ranks_granted_one_gpu_torch_cannot_see_say_they_would_share_it():
    """--gres=gpu:1 with 2 tasks on a node: each rank sees CUDA_VISIBLE_DEVICES=0; torch here
    sees no CUDA, so the run works on CPUs, but the warning says what CUDA would make of it."""
    rows = gpu_rows([{**view(r, "n1", None, visible="0"), "count": 0} for r in (0, 1)]
                    + [{**view(2, "n2", None, visible="0"), "count": 0}])
    assert [r.status for r in rows] == [WARN, WARN]
    assert rows[0].detail.startswith("ranks 0-1 on n1 are granted the same GPUs "
                                     "(CUDA_VISIBLE_DEVICES='0')")
    assert "would share a GPU" in rows[0].detail
    assert rows[1].detail.startswith("CUDA_VISIBLE_DEVICES is set on 3 rank(s)")


def test_ranks_granted_a_gpu_each_of_one_list_torch_cannot_see_would_not_share():
    """--gres=gpu:4 with 4 tasks: every rank sees CUDA_VISIBLE_DEVICES=0,1,2,3 and with CUDA
    would take the one of its node-local rank."""
    rows = gpu_rows([{**view(r, "n1", None, visible="0,1,2,3"), "count": 0} for r in range(4)])
    assert [r.status for r in rows] == [WARN] and "would share" not in rows[0].detail
    assert rows[0].detail.startswith("CUDA_VISIBLE_DEVICES is set on 4 rank(s)")


def test_command_gpus_list_each_workers_gpus_or_say_why_not():
    rows = command_gpu_rows([(0, "n1", ("0",)), (0, "n1", ("1",)), (1, "n1", ("2",)),
                             (1, "n2", ("0", "2")), (1, "n2", ("1", "3"))])
    assert [r.status for r in rows] == [OK]
    assert rows[0].detail.endswith("worker 0 on n1: 0,1; worker 1 on n1: 2; worker 1 on n2: "
                                   "0,1,2,3")
    rows = command_gpu_rows([(0, "n1", ("0",)), (0, "n1", ("0",)), (1, "n1", ("1",))])
    assert [r.status for r in rows] == [WARN, OK] and rows[0].detail.startswith("workers 0:")
    assert command_gpu_rows([(0, "n1", ()), (1, "n1", ())])[0].detail.endswith("run on CPUs")


def test_torchrun_as_the_command_needs_one_rank_of_each_worker_per_node():
    assert torchrun_crowding([(0, "n1"), (0, "n2"), (1, "n1"), (1, "n2")]) == ""
    said = torchrun_crowding([(0, "n1"), (0, "n1"), (1, "n2"), (1, "n2"), (2, "n3")])
    assert said.startswith("objective.command is torchrun, the launcher of a node's processes, "
                           "but worker 0 has 2 ranks on 1 node(s) (workers 0-1 alike): each "
                           "rank would start"), said


@pytest.mark.parametrize("command", [
    '"{python}", "-m", "torch.distributed.run", "--nproc-per-node", "2", "train.py"',
    '"sh", "-c", "exec torchrun --nproc-per-node 2 train.py"'])  # as in the README
def test_the_doctor_fails_torchrun_on_a_worker_of_two_ranks_on_one_node(tmp_path, command):
    """What the search refuses to start for, the doctor says with the search's line; with one
    rank per worker the row passes."""
    config = tmp_path / "torchrun.toml"
    config.write_text(f'[objective]\ncommand = [{command}]\n'
                      '[space.x]\ntype = "float"\nlow = 0.0\nhigh = 1.0\n'
                      "[search]\nranks_per_worker = 2\n")
    done = run(mpirun_cmd(2, "-m", "atoll", "doctor", "--config", str(config)))
    assert done.returncode == EXIT_BAD_INPUT, done.stdout + done.stderr
    assert rows_of(done.stdout)["command"] == [FAIL], done.stdout
    assert "worker 0 has 2 ranks on 1 node(s): each rank would start a torchrun of its own" \
        in flat(done.stdout), done.stdout
    # the search refuses with this line (test_command), so the doctor says it as the refusal
    assert "atoll: error: objective.command is torchrun, the launcher of a node's processes, " \
        "but worker 0 has 2 ranks on 1 node(s)" in done.stderr, done.stderr
    done = run(mpirun_cmd(2, "-m", "atoll", "doctor", "--config", str(config), "--set",
                          "search.ranks_per_worker=1"))
    assert rows_of(done.stdout)["command"] == [OK], done.stdout + done.stderr
    assert "atoll: error" not in done.stderr, done.stderr


def test_a_commands_threads_are_the_ones_its_env_gives_its_script(tmp_path):
    config = tmp_path / "command.toml"
    config.write_text('[objective]\ncommand = ["{python}", "train.py"]\n'
                      'env = { OMP_NUM_THREADS = "64" }\n'
                      '[space.x]\ntype = "float"\nlow = 0.0\nhigh = 1.0\n')
    done = run(mpirun_cmd(2, "-m", "atoll", "doctor", "--config", str(config)))
    assert rows_of(done.stdout)["CPU threads"] == [WARN], done.stdout + done.stderr
    assert "128 thread(s) in all (OMP_NUM_THREADS=64 (objective.env))" in flat(done.stdout)
    config.write_text(config.read_text().replace('"64"', '"1"'))
    done = run(mpirun_cmd(2, "-m", "atoll", "doctor", "--config", str(config)))
    assert rows_of(done.stdout)["CPU threads"] == [OK], done.stdout + done.stderr


def test_a_filesystem_without_locks_says_what_to_set():
    rows = lock_rows({"dir": "/lustre/x", "env": None, "second": "rank 4 on n2",
                      "create_error": "unable to lock file, errno = 38", "refused": False,
                      "probe_error": ""})
    assert rows[0].status == FAIL and "set HDF5_USE_FILE_LOCKING=FALSE" in rows[0].detail


def test_locks_not_honoured_across_hosts_is_a_warning():
    rows = lock_rows({"dir": "/lustre/x", "env": None, "second": "rank 4 on n2",
                      "create_error": "", "refused": False, "probe_error": ""})
    assert rows[0].status == WARN and "not honoured" in rows[0].detail


@pytest.mark.parametrize(("ranks", "text"), [([0], "0"), ([0, 1, 2, 5], "0-2, 5"),
                                             (list(range(0, 40, 2)), "0, 2, 4, ..., 36, 38")])
def test_ranks_text(ranks, text):
    assert ranks_text(ranks) == text


def test_render_wraps_long_details_under_themselves():
    text = render([Row("x", OK, "word " * 40)], "header", width=60)
    lines = text.splitlines()
    assert all(len(line) <= 60 for line in lines)
    assert lines[4].startswith(" " * 10) and lines[-1].startswith("ready")


def test_more_islands_than_workers_is_a_warning_and_ready(tmp_path):
    done = run(atoll_cmd("doctor", "--config", SPHERE, "--run-dir", str(tmp_path / "r")))
    # sphere has 2 islands: 1 rank runs 1
    assert done.returncode == 0, done.stdout + done.stderr
    assert rows_of(done.stdout)["islands"] == [WARN]
    assert "search.islands=2 is more than the 1 worker(s): the search runs 1 island(s)" in \
        flat(done.stdout)
    # the search's own warning, once (doctor plans the job as the search does, and says it once)
    assert done.stderr.count("of this job (1 rank(s) / 1 per worker)") == 1, done.stderr


def test_the_space_check_counts_a_checkpoint_per_worker():
    from atoll.config import parse_config
    from atoll.engine.topology import plan_layout

    config = parse_config({"objective": {"name": "sphere"}})
    layout = plan_layout(4, 1, 2)
    free = 10 * 2**30
    (plain,) = space_rows(config, layout, ROOT, free)
    (kept,) = space_rows(config, layout, ROOT, free, checkpoint=3 * 2**30)
    assert plain.status == OK and "checkpoint" not in plain.detail
    assert kept.status == FAIL and "4 checkpoint(s) of 3.0 GiB" in kept.detail


ASHA = ROOT / "tests" / "configs" / "asha_demo.toml"


def test_rungs_below_counts_the_rungs_the_schedulers_judge_at():
    from atoll.scheduling.halving import is_rung, rungs_below

    for low, eta, top in [(1, 3, 27), (1, 3, 28), (2, 3, 30), (1, 2, 9), (4, 4, 4), (3, 2, 2)]:
        assert rungs_below(low, eta, top) == sum(is_rung(e, low, eta, top) for e in range(top))


def test_the_checkpoint_check_says_what_asha_keeps_and_what_bounds_it(tmp_path):
    """Paused individuals keep their checkpoints, with random candidates about eta^R - 1 per
    completed evaluation (here 3^2 - 1 = 8): the estimate covers what a real search leaves,
    without being far above it; unbounded is a warning, a limit is said."""
    from atoll.config import load_config, parse_config

    path = ASHA
    run_dir = tmp_path / "run"
    done = run(mpirun_cmd(4, "-m", "atoll", "search", "-q", "--config", str(path),
                          "--run-dir", str(run_dir)))
    assert done.returncode == 0, done.stderr[-2000:]
    kept = len(list((run_dir / "checkpoints").glob("ind*.h5")))
    (row,) = paused_checkpoint_rows(load_config(path), 100, checkpoint=2**20)
    assert row.status == WARN and "nothing bounds them" in row.detail
    assert "8 per completed evaluation" in row.detail and "800 for a budget of 100" in row.detail
    assert "800.0 MiB at the size of the largest checkpoint" in row.detail
    assert 800 / 3 <= kept <= 800, kept
    bounded = load_config(path, ["record.checkpoint_limit_mb=500"])
    (row,) = paused_checkpoint_rows(bounded, 100)
    assert row.status == OK and "record.checkpoint_limit_mb = 500 bounds them" in row.detail
    assert "each the size of your training state" in row.detail
    command = parse_config({"objective": {"command": ["python", "train.py"]},
                            "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
                            "pruning": {"rule": "asha", "max_epochs": 9},
                            "record": {"checkpoint_limit_mb": 500}})
    (row,) = paused_checkpoint_rows(command, 100, checkpoint=2**20)
    assert row.status == WARN and "does not count a command's own checkpoint" in row.detail
    assert "MiB" not in row.detail  # its directories' size is not known
    unknown = load_config(path, ["pruning.max_epochs=0"])
    assert "set pruning.max_epochs" in paused_checkpoint_rows(unknown, 100)[0].detail
    assert paused_checkpoint_rows(parse_config({"objective": {"name": "sphere"}}), 100) == []


LONG_CHOICES = """[objective]
name = "objectives:lr_only"
[space.lr]
type = "float"
low = 0.001
high = 1.0
[space.label]
type = "categorical"
choices = ["{a}", "{b}"]
[search]
evaluations = 3000
"""


def test_the_space_check_covers_what_a_search_with_long_choices_writes(tmp_path):
    """Worker files keep a text parameter as wide as its longest choice: the estimate counts
    that, and covers the record a real search leaves (results.h5 counted twice: it is
    rewritten beside itself), without being far above it."""
    from atoll.config import load_config
    from atoll.engine.topology import plan_layout

    path = tmp_path / "atoll.toml"
    path.write_text(LONG_CHOICES.format(a="a" * 300, b="b" * 300))
    run_dir = tmp_path / "run"
    done = run(atoll_cmd("search", "-q", "--config", str(path), "--run-dir", str(run_dir)))
    assert done.returncode == 0, done.stderr[-2000:]
    written = sum(p.stat().st_size for p in run_dir.rglob("*.h5"))
    peak = written + (run_dir / "results.h5").stat().st_size
    (row,) = space_rows(load_config(path), plan_layout(1, 1, 1), tmp_path, 2**40)
    estimate = float(row.detail.split("needs about ")[1].split(" MiB")[0]) * 2**20
    assert peak <= estimate <= 3 * peak, (peak, estimate)
