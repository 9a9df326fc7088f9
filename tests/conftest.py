"""Shared test helpers: real mpirun jobs and real CLI subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MPIRUN = BIN / "mpirun"


# Open MPI keeps a session directory ompi.<launcher pid> under TMPDIR. A killed launcher leaves
# its own behind, and a later launcher that gets the same pid cannot start ("The PMIx server's
# listener thread failed to start"): so the tests' launchers get a directory of their own, and
# kill_tree removes what a killed launcher left.
MPI_TMPDIR = Path(tempfile.mkdtemp(prefix="atoll-tests-mpi-"))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(MPI_TMPDIR, ignore_errors=True)


def _remove_session_dir(launcher_pid: int) -> None:
    """What a killed launcher left under MPI_TMPDIR."""
    shutil.rmtree(MPI_TMPDIR / f"ompi.{launcher_pid}", ignore_errors=True)


def mpi_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_tcp_if_include="lo", PYTHONUNBUFFERED="1", TMPDIR=str(MPI_TMPDIR),
               PYTHONPATH=os.pathsep.join([str(ROOT / "app"), str(ROOT / "tests"), str(ROOT)]))
    env.update(extra)
    return env


# mpirun itself failing to start (before any rank runs); seen rarely on these machines.
LAUNCHER_FLAKES = ("The PMIx server's listener thread failed to start",)


def run(cmd: list[str], timeout: float = 240, cwd: Path | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command in its own process group; on timeout kill the whole group and fail.

    A launch that mpirun could not start at all (LAUNCHER_FLAKES: no rank ran, nothing of the
    test happened) is tried once more."""
    done = run_once(cmd, timeout, cwd, env)
    if done.returncode != 0 and any(flake in done.stderr for flake in LAUNCHER_FLAKES):
        done = run_once(cmd, timeout, cwd, env)
    return done


def run_once(cmd: list[str], timeout: float, cwd: Path | None,
             env: dict[str, str] | None) -> subprocess.CompletedProcess[str]:
    """Run a command once in its own process group; on timeout kill the whole group (a
    script's mpirun and ranks too, not only the script) and fail."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=cwd or ROOT, env=env or mpi_env(), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        _remove_session_dir(proc.pid)
        pytest.fail(f"timed out after {timeout}s: {' '.join(cmd)}\n{out}\n{err}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def mpirun_cmd(n: int, *args: str) -> list[str]:
    return [str(MPIRUN), "-n", str(n), "--oversubscribe", "--bind-to", "none",
            sys.executable, *args]


def atoll_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "atoll", *args]


def mpirun_atoll(n: int, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return run(mpirun_cmd(n, "-m", "atoll", *args), timeout=timeout)


def file_syncs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """From now on, each ``os.fsync`` (of the file or directory it syncs) and ``os.replace``
    (of the name it replaces) of this process, in order, as they happen."""
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(descriptor: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{descriptor}")))
        real_fsync(descriptor)

    def replace(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        events.append(("replace", os.fspath(target)))
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


def missing_here(reason: str, what: str) -> NoReturn:
    """A test whose system part is missing: a skip that says why, or a failure with CI=true,
    where .ci/run installs every part and every test must run."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {what}: {reason}")
    pytest.skip(reason)


def _fuse_unavailable() -> str:
    """Why no FUSE file system can be mounted here ("" if one can)."""
    if not Path("/dev/fuse").exists():
        return "no /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "no fusermount3 (Debian's fuse3)"
    try:
        import mfusepy  # noqa: F401  (loads libfuse)
    except (ImportError, OSError) as exc:
        return f"no FUSE for Python ({exc})"
    return ""


@pytest.fixture
def no_hard_links(tmp_path: Path) -> Iterator[Path]:
    """A folder on a real file system that refuses hard links (tests/no_links_fs.py, FUSE), as
    SMB/CIFS shares and object-store mounts do; unmounted afterwards.

    Where FUSE is missing the tests skip and say why; with CI=true they fail instead (.ci/run
    installs fuse3)."""
    reason = _fuse_unavailable()
    if reason:
        missing_here(reason, "no FUSE file system can be mounted")
    folder, mount = tmp_path / "no-links-folder", tmp_path / "no-links"
    folder.mkdir()
    mount.mkdir()
    said = tmp_path / "no-links-server.log"  # a file, not a pipe: a full pipe would stall it
    with open(said, "w") as log:
        server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "no_links_fs.py"),
                                   str(folder), str(mount)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 20
        while not os.path.ismount(mount):
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the FUSE file system did not mount: {said.read_text()}")
            time.sleep(0.05)
        yield mount
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(mount)], capture_output=True)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (from /proc), children first found first."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def rank_pids(launcher: int) -> dict[int, int]:
    """World rank -> pid of the launcher's rank processes (from their environment)."""
    found = {}
    for pid in descendants(launcher):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            if item.startswith(b"OMPI_COMM_WORLD_RANK="):
                found[int(item.split(b"=", 1)[1])] = pid
    return found


def kill_tree(proc: subprocess.Popen[bytes] | subprocess.Popen[str], sig: int = signal.SIGKILL
              ) -> None:
    """Send ``sig`` to a launcher and every process it started, until none is left alive.

    Enumerating again after each round catches a rank that was being started meanwhile.
    """
    victims: set[int] = set()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = {proc.pid, *descendants(proc.pid)} if proc.poll() is None else \
            set(descendants(proc.pid))
        victims |= found
        living = [p for p in victims if alive(p)]
        if not living:
            break
        for pid in living:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    proc.wait()
    _remove_session_dir(proc.pid)


def search_then_still(tmp_path: Path, config: Path, inner: str, mark: str
                      ) -> tuple[Path, Path, int]:
    """A search of one worker (one process), killed with -9 right after the first evaluation
    that ``mark`` names ended (objectives.then_still: the next one reports nothing, and
    ``record.flush_interval`` is long, so no flush of the loop's comes between); the run
    directory, the trace folder, and the marked individual's id."""
    trace = tmp_path / "trace"
    trace.mkdir(exist_ok=True)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        atoll_cmd("search", "--config", str(config), "--run-dir", str(run_dir),
                  "--set", "search.ranks_per_worker=1", "--set", "record.flush_interval=60",
                  "--set", "objective.name=objectives:then_still",
                  "--set", f"objective.options.inner={json.dumps(inner)}",
                  "--set", f"objective.options.mark={json.dumps(mark)}",
                  "--set", f"objective.options.trace={json.dumps(str(trace))}"),
        cwd=ROOT, env=mpi_env(), start_new_session=True, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list(trace.glob("still-*")):
            time.sleep(0.05)
    finally:
        kill_tree(proc)
    marked = list(trace.glob("marked-*"))
    assert marked and list(trace.glob("still-*")), "no evaluation was marked"
    return run_dir, trace, int(marked[0].name.split("-")[1])


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not count)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _slurm_unavailable() -> str:
    from slurm_cluster import missing_tools

    if missing := missing_tools():
        return (f"SLURM is not installed ({', '.join(missing)} missing): as root, "
                "apt-get install -y slurm-wlm munge libpmix-dev")
    if os.geteuid() != 0:
        return "slurmd must run as root to start jobs; run these tests as root"
    return ""


@pytest.fixture(scope="session")
def slurm() -> Iterator[Any]:
    """One local two-node SLURM (tests/slurm_cluster.py) for every module's SLURM tests.

    Where SLURM is missing or we are not root they skip and say why; with CI=true they fail
    instead, so that CI always runs them (.ci/run installs SLURM)."""
    from slurm_cluster import SlurmCluster

    reason = _slurm_unavailable()
    if reason:
        missing_here(reason, "the SLURM tests cannot run")
    # munged runs as the munge user: pytest's own temp dirs (mode 700) are closed to it
    root = Path(tempfile.mkdtemp(prefix="atoll-slurm-"))
    root.chmod(0o755)
    cluster = SlurmCluster(root)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
