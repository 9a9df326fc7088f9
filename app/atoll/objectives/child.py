"""One rank's command as a child process: its own process group, its output in a log file.

The child runs in a new session (so its process group is its own: a stop or a timeout ends the
script and everything it started, and a Ctrl-C meant for Atoll does not reach it first). Two
threads copy its stdout and stderr line by line into the log file; stdout lines are kept for
the caller to read, the last stderr lines for the error of a failed evaluation. On Linux the
direct child is :mod:`atoll.objectives.supervisor`, which starts the command and ends every
process below it when the command exits, when the rank dies (even by SIGKILL), and when the
rank ends it.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from atoll.objectives import supervisor

STDERR_TAIL = 8
"""Lines of stderr a failed evaluation's error quotes."""
TAIL_LINE = 400
"""Characters of each such line quoted (the whole line is in the command's log file)."""
_READER_GRACE = 5.0
"""Seconds to wait for the output of a finished child to be read to its end."""
_END_GRACE = 5.0
"""Seconds the supervisor has to end the command's processes before its group gets SIGKILL."""
SUPERVISED = sys.platform.startswith("linux")
"""Whether commands run under the supervisor (it needs Linux's ``prctl``)."""
_SUPERVISOR = os.path.abspath(supervisor.__file__)  # a relative PYTHONPATH entry is from here


class ChildError(RuntimeError):
    """A command that could not start."""


class Child:
    """A running command; :meth:`close` always ends it and every process it started."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path,
                 log_path: Path) -> None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._lock = threading.Lock()
        self.stdout: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self._news = threading.Event()  # a line came, or a stream closed
        try:
            self._proc = _started(argv, env, cwd)
        except OSError as exc:
            self._log.close()
            raise ChildError(f"objective.command: cannot start {argv[0]!r} in {cwd}: "
                             f"{exc.strerror or exc}") from None
        assert self._proc.stdout is not None and self._proc.stderr is not None
        self._readers = [threading.Thread(target=self._copy, args=(stream, keep), daemon=True)
                         for stream, keep in ((self._proc.stdout, self.stdout.put),
                                              (self._proc.stderr, self._keep_tail))]
        for reader in self._readers:
            reader.start()

    def _copy(self, stream: IO[str], keep: Callable[[str], None]) -> None:
        for line in stream:
            with self._lock:
                self._log.write(line)
                self._log.flush()
            keep(line.rstrip("\n"))
            self._news.set()
        self._news.set()

    def _keep_tail(self, line: str) -> None:
        cut = len(line) - TAIL_LINE
        self._tail.append(line if cut <= 0 else f"{line[:TAIL_LINE]}... ({cut} more characters)")

    def wait(self, timeout: float) -> None:
        """Return after ``timeout`` seconds, or as soon as the child says something or ends
        (so that a short command costs its own time, not a whole tick)."""
        if self._news.wait(timeout):
            self._news.clear()
        if not self._readers[0].is_alive() and self._proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):  # stdout closed: it is ending
                self._proc.wait(timeout)

    def exit_code(self) -> int | None:
        """The exit code once the child ended and its output is read (None before)."""
        code = self._proc.poll()
        if code is None:
            return None
        self._kill_group(signal.SIGKILL)  # what the script started ends with it
        for reader in self._readers:
            reader.join(_READER_GRACE)
        return code

    def stop(self, grace: float) -> None:
        """SIGTERM to the process group, everything ended after ``grace`` seconds; waits for
        the end."""
        self._kill_group(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(grace)
        self._end()

    def stderr_tail(self) -> str:
        return " | ".join(self._tail)

    def close(self) -> None:
        self._end()
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()
        self._log.close()

    def _end(self) -> None:
        """End the command and every process it started (the supervisor kills them all,
        whatever their process group; then the group gets SIGKILL too), and read its output."""
        if SUPERVISED and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._proc.pid, supervisor.END)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(_END_GRACE)
        if self._proc.poll() is None:
            self._kill_group(signal.SIGKILL)
            self._proc.wait()
        self.exit_code()

    def _kill_group(self, sig: int) -> None:
        try:
            os.killpg(self._proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # the group has ended


def _started(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> subprocess.Popen[str]:
    """The running command (under the supervisor on Linux); OSError if it cannot start."""
    if not SUPERVISED:
        return _popen(list(argv), env, cwd, ())
    status, said = os.pipe()
    try:
        proc = _popen([sys.executable, "-S", "-I", _SUPERVISOR, str(os.getpid()),
                       str(said), *argv], env, cwd, (said,))
    except OSError:
        os.close(status)
        raise
    finally:
        os.close(said)
    with os.fdopen(status, "rb") as answer:
        failed = answer.read()  # nothing once the command started
    if failed:
        proc.communicate()
        errno = int(failed)
        raise OSError(errno, os.strerror(errno))
    return proc


def _popen(argv: list[str], env: Mapping[str, str], cwd: Path,
           pass_fds: tuple[int, ...]) -> subprocess.Popen[str]:
    return subprocess.Popen(argv, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", start_new_session=True, pass_fds=pass_fds)
