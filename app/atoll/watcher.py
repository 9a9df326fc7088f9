"""The progress lines of a running job: rank 0 starts ``atoll watch`` beside the search as a
child process, which reads the run's flushed files, so the search itself does no extra work."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

_RANK_VARIABLES = ("OMPI_COMM_WORLD", "OMPI_MCA_ess", "PMIX_", "PMI_", "SLURM_PROCID",
                   "SLURM_LOCALID")


@contextlib.contextmanager
def progress_lines(run_dir: Path, quiet: bool, verbose: bool, interval: float) -> Iterator[None]:
    """On rank 0, a watcher process prints progress lines while the job runs (it reads the
    run's flushed files, so the search itself does no extra work). When the job returns, the
    watcher prints its last line at once (SIGTERM); after an error it is just stopped."""
    from atoll.logs import launcher_rank

    if quiet or launcher_rank() != 0:
        yield
        return
    command = [sys.executable, "-m", "atoll", "watch", str(run_dir), "--plain",
               "--interval", str(interval), "--after", repr(time.time()),
               "--parent", str(os.getpid()), *(["-v"] if verbose else [])]
    # The watcher is no MPI rank: it must not look like one to the launcher, SLURM or tools
    # that find ranks by their environment.
    env = {k: v for k, v in os.environ.items() if not k.startswith(_RANK_VARIABLES)}
    watcher = start_watcher(command, env)
    try:
        yield
    except BaseException:
        watcher.kill()
        watcher.wait()
        raise
    watcher.terminate()
    try:
        watcher.wait(timeout=30)
    except subprocess.TimeoutExpired:
        watcher.kill()
        watcher.wait()


def start_watcher(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The watcher starts with SIGTERM blocked (a signal mask survives fork and exec), and
    unblocks it once it listens (:func:`atoll.views.progress.follow`): the SIGTERM a short job
    sends at its end may come while the watcher's Python starts, and must wait for it instead
    of killing it before it printed anything. The search blocks it only for the spawn."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, env=env)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
