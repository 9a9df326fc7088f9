"""A command objective: any training script, run once per individual on each rank of a worker.

Each rank starts the command (``[objective] command``, placeholders filled) as a child process
with the variables of torch.distributed's ``env://`` rendezvous, as torchrun sets them, for a
world that is the worker's ranks: an unchanged torchrun-style script runs as one DDP job per
individual. The worker's ranks follow their children together: every tick they share, in one
small allgather, what the leader's child printed (:mod:`atoll.report_line` lines) and which
children ended, so that they call ``ctx.report`` at the same epochs and end alike.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atoll.errors import ObjectiveError, described
from atoll.objectives.child import Child, ChildError
from atoll.objectives.lines import BadLine, Lines
from atoll.record.paths import RunPaths

if TYPE_CHECKING:
    from mpi4py import MPI

    from atoll.config import Config
    from atoll.evaluation.context import Context

TICK = 0.05
"""Seconds between two looks at the children (and one allgather on a multi-rank worker)."""


class CommandFailed(RuntimeError):
    """The command failed: it exited non-zero, printed a bad line or no result, or hung."""


@dataclass(frozen=True)
class _Tick:
    """What one rank tells the worker's other ranks each tick (the leader's lines count)."""

    epochs: list[tuple[int, dict[str, float]]]
    result: float | None
    exit_code: int | None
    bad_line: str
    timed_out: bool


class CommandObjective:
    """``objective(params, ctx)`` for ``[objective] command``."""

    def __init__(self, config: Config, run_dir: Path) -> None:
        objective = config.objective
        self.command = objective.command
        self.env = objective.env
        self.result_metric = objective.result_metric
        self.stop_grace = objective.stop_grace
        self.data_dir = objective.data_dir
        self.cwd = Path(objective.config_dir or os.getcwd())
        self.eval_timeout = config.search.eval_timeout
        self.fallback_metric = config.pruning.metric  # a pruned script's value, if it has none
        self.paths = RunPaths(run_dir)

    def preflight(self, options: Mapping[str, Any], data_dir: str | None,
                  parameter_names: Any) -> None:
        """Refuse a job whose program cannot be found, before any individual fails for it."""
        program = self.command[0].replace("{python}", sys.executable)
        if "{" in program:
            return  # a placeholder names it: checked when each individual starts
        found = shutil.which(str(self.cwd / program) if "/" in program else program)
        if found is None:
            raise ObjectiveError(f"objective.command: {program!r} is not an executable on PATH "
                                f"or in {self.cwd}; give its path, or e.g. "
                                f'["{{python}}", "script.py", ...]')

    def __call__(self, params: Mapping[str, Any], ctx: Context) -> float:
        env = {**os.environ, **rendezvous(ctx.comm)}
        with _own_deadline():
            child, error = self._start(params, env, ctx)
            errors = ctx.comm.allgather(error) if ctx.size > 1 else [error]
            try:
                failed = [r for r, e in enumerate(errors) if e]
                if failed:  # every rank learns it: none is left waiting for the others
                    raise CommandFailed(error or f"the command of worker rank {failed[0]} "
                                        "could not start")
                assert child is not None
                return self._follow(child, ctx)
            finally:
                if child is not None:
                    child.close()

    def _start(self, params: Mapping[str, Any], env: dict[str, str],
               ctx: Context) -> tuple[Child | None, str]:
        """This rank's child, or why it could not start (said to the worker's other ranks)."""
        work_dir = self.paths.work_dir(ctx.individual_id)
        values = {**params, "id": ctx.individual_id, "run_dir": self.paths.run_dir,
                  "work_dir": work_dir, "data_dir": self.data_dir, "python": sys.executable}
        try:
            work_dir.mkdir(parents=True, exist_ok=True)
            argv = [word.format(**values) for word in self.command]
            env.update({k: v.format(**values) for k, v in self.env.items()})
            log = self.paths.command_log(ctx.individual_id, ctx.rank)
            return Child(argv, env, self.cwd, log), ""
        except (OSError, ValueError, ChildError) as exc:
            return None, described(exc)

    def _follow(self, child: Child, ctx: Context) -> float:
        """Watch the children until they end, fail, time out or are told to stop."""
        deadline = time.monotonic() + self.eval_timeout if self.eval_timeout else math.inf
        lines, last = Lines(), dict[str, float]()
        while True:
            time.sleep(TICK)
            mine = _look(child, lines, ctx.is_leader, time.monotonic() > deadline)
            ticks = ctx.comm.allgather(mine) if ctx.size > 1 else [mine]
            leader = ticks[0]
            for epoch, metrics in leader.epochs:
                last.update(metrics)
                if ctx.report(epoch, **metrics):
                    child.stop(self.stop_grace)
                    return self._stopped_value(_last_result(child, lines, ctx.is_leader), last)
            self._raise_on_failure(child, ctx.rank, ticks)
            if all(t.exit_code == 0 for t in ticks):
                return self._value(leader.result, last)

    def _raise_on_failure(self, child: Child, rank: int, ticks: list[_Tick]) -> None:
        """Every rank whose child failed says why; the leader fails for any rank's child."""
        leader = ticks[0]
        if leader.bad_line:
            raise CommandFailed(f"the command printed a bad line: {leader.bad_line}")
        if leader.timed_out:
            raise CommandFailed(f"the command ran past search.eval_timeout = "
                                f"{self.eval_timeout:g} s and was killed{_quoted(child)}")
        failed = [r for r, t in enumerate(ticks) if t.exit_code not in (None, 0)]
        if rank in failed:
            raise CommandFailed(f"the command {_ended(ticks[rank].exit_code)}{_quoted(child)}")
        if failed and rank == 0:
            raise CommandFailed(f"the command of worker rank {failed[0]} failed")

    def _value(self, result: float | None, last: Mapping[str, float]) -> float:
        if result is not None:
            return result
        if self.result_metric in last:
            return last[self.result_metric]
        wanted = f"'{self.result_metric}=<number>' in an 'ATOLL epoch=...' line or " \
            if self.result_metric else ""
        raise CommandFailed(f"the command ended without a result: print {wanted}'ATOLL "
                            "result=<number>' on stdout (worker rank 0)")

    def _stopped_value(self, result: float | None, last: Mapping[str, float]) -> float:
        """The value of a stopped evaluation: its result line if it printed one on SIGTERM,
        else its last value of ``result_metric`` or of the pruning metric."""
        for value in (result, last.get(self.result_metric), last.get(self.fallback_metric)):
            if value is not None:
                return value
        return math.nan


def rendezvous(comm: MPI.Comm) -> dict[str, str]:
    """torchrun's ``env://`` variables for this rank in a world of the worker's ranks
    (collective on the worker's communicator: one allgather). The leader's OS picks the port."""
    rank, host = comm.Get_rank(), socket.gethostname()
    seen: list[tuple[str, int]] = comm.allgather((host, _free_port() if rank == 0 else 0))
    leader_host, port = seen[0]
    on_my_host = [r for r, (h, _) in enumerate(seen) if h == host]
    one_host = all(h == leader_host for h, _ in seen)
    return {"RANK": str(rank), "WORLD_SIZE": str(len(seen)),
            "LOCAL_RANK": str(on_my_host.index(rank)), "LOCAL_WORLD_SIZE": str(len(on_my_host)),
            "MASTER_ADDR": "127.0.0.1" if one_host else leader_host, "MASTER_PORT": str(port)}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def _look(child: Child, lines: Lines, is_leader: bool, late: bool) -> _Tick:
    code = child.exit_code()  # first: once it is known, every line the child printed is queued
    if not is_leader:  # only the leader's lines count
        _read_rest(child, None)
        return _Tick([], None, code, "", False)
    try:
        _read_rest(child, lines)
    except BadLine as exc:
        return _Tick([], None, code, str(exc), False)
    return _Tick(lines.take_epochs(), lines.result, code, "", late)


def _read_rest(child: Child, lines: Lines | None) -> None:
    """Read (or with None, drop) every queued stdout line; raises at the first bad one."""
    while not child.stdout.empty():
        line = child.stdout.get()
        if lines is not None:
            lines.add(line)


def _last_result(child: Child, lines: Lines, is_leader: bool) -> float | None:
    """The result line a stopped command may have printed on its way out (the leader's)."""
    try:
        _read_rest(child, lines if is_leader else None)
    except BadLine:
        pass  # its value is then its last metric, as if it had printed nothing more
    return lines.result


def _ended(code: int | None) -> str:
    if code is not None and code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def _quoted(child: Child) -> str:
    tail = child.stderr_tail()
    return f"; its stderr ended with: {tail}" if tail else " (its stderr is empty)"


@contextmanager
def _own_deadline() -> Iterator[None]:
    """Ignore ``search.eval_timeout``'s SIGALRM during the command: the worker's ranks agree on
    the command's deadline themselves, so that none leaves the others in a collective."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGALRM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGALRM, previous)
