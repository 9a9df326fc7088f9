"""Shared test helpers: real mpirun jobs and real CLI subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MPIRUN = BIN / "mpirun"


def mpi_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_tcp_if_include="lo", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def run(cmd: list[str], timeout: float = 240, cwd: Path | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command in its own process group; on timeout kill the whole group and fail."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=cwd or ROOT, env=env or mpi_env(), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"timed out after {timeout}s: {' '.join(cmd)}\n{out}\n{err}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def mpirun_cmd(n: int, *args: str) -> list[str]:
    return [str(MPIRUN), "-n", str(n), "--oversubscribe", "--bind-to", "none",
            sys.executable, *args]


def atoll_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "atoll", *args]


def mpirun_atoll(n: int, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return run(mpirun_cmd(n, "-m", "atoll", *args), timeout=timeout)
