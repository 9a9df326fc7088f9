"""The direct child of a rank that runs a command: it ends every process the command starts.

``PR_SET_PDEATHSIG`` reaches only a rank's direct child, and a script may start processes of its
own (a shell wrapper, a torchrun-like launcher, whose workers even start sessions of their own).
So on Linux a rank starts this small program (``python -S -I supervisor.py RANK_PID STATUS_FD
COMMAND...``, the standard library only: no Atoll import) and it starts the command. It is the
*child subreaper* of everything below it (an orphan comes to it, whatever its session or
process group), and asks the kernel for :data:`END` when the rank dies. It ends everything below
it with SIGKILL when :data:`END` comes (the rank died, or the rank's stop is past its grace) and
when the command exits (what the command left), then exits as the command did. Other signals
(the SIGTERM a stop sends the process group, a launcher's SIGUSR1) are the command's to handle.

It writes nothing to STATUS_FD when the command started, else the ``errno`` of the failure, so
that the rank reports a command that cannot start as before.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

END = signal.SIGRTMIN + 2
"""The signal that ends everything: the rank's death signal, and the rank's own request. A
real-time signal: no launcher or shell sends it to the process group by chance."""
_LEFT_TO_THE_COMMAND = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1,
                        signal.SIGUSR2)
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_AWAITED = {END, signal.SIGCHLD}


def _ignore(signum: int, frame: object) -> None:
    """A handler, not SIG_IGN: the command gets the default back when it starts."""


def main(argv: list[str]) -> int:
    rank, status = int(argv[1]), int(argv[2])
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # END and SIGCHLD stay blocked and are taken with sigwaitinfo, never by a handler: the
    # death signal comes once for every thread of the rank that dies, and a handler that raised
    # would be interrupted by the next one.
    signal.pthread_sigmask(signal.SIG_BLOCK, _AWAITED)
    for sig in _LEFT_TO_THE_COMMAND:
        signal.signal(sig, _ignore)
    prctl(_PR_SET_PDEATHSIG, int(END), 0, 0, 0)
    if os.getppid() != rank:  # the rank died before the request
        return -signal.SIGKILL
    command = _spawn(argv[3:], status)
    if command is None:
        return 127
    return _follow(command)


def _spawn(command: list[str], status: int) -> int | None:
    """Start the command (no signal blocked); its pid, or None (its errno said on ``status``)."""
    os.set_inheritable(status, False)
    try:
        pid = os.posix_spawnp(command[0], command, os.environ, setsigmask=())
    except OSError as exc:
        os.write(status, str(exc.errno or 0).encode())
        os.close(status)
        return None
    os.close(status)
    quiet = os.open(os.devnull, os.O_WRONLY)
    for stream in (1, 2):  # the command's output ends when the command's processes end
        os.dup2(quiet, stream)
    os.close(quiet)
    return pid


def _follow(command: int) -> int:
    """Wait for the command or :data:`END`, end what is left; the command's exit status (-N:
    killed by signal N)."""
    while (code := _exit_of(command)) is None:
        if signal.sigwaitinfo(_AWAITED).si_signo == END:
            code = -signal.SIGKILL
            break
    _end_all()
    return code


def _exit_of(command: int) -> int | None:
    """Reap what has exited (orphans of the command come here too); the command's exit
    status once it is among them."""
    while True:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return None
        if pid == command:
            return os.waitstatus_to_exitcode(status)


def _end_all() -> None:
    """SIGKILL to every process below this one, until none is left."""
    while True:
        try:  # quick when nothing is left: no child of a subreaper, no descendant
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            continue
        for below in _descendants(os.getpid()):
            try:
                os.kill(below, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _descendants(top: int) -> list[int]:
    """Every process below ``top``, from /proc (pathlib would cost the start more)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(name))
    found, todo = [], [top]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def _exit_as(code: int) -> None:
    """Exit with ``code``, or be killed by signal ``-code``, as the command was."""
    if code < 0:
        if -code != signal.SIGKILL:  # which has no handler to reset
            signal.signal(-code, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [-code])
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    _exit_as(main(sys.argv))
