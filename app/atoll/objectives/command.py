"""A command objective: any training script, run once per individual on each rank of a worker.

Each rank starts the command (``[objective] command``, placeholders filled) as a child process
with the variables of torch.distributed's ``env://`` rendezvous, as torchrun sets them, for a
world that is the worker's ranks: an unchanged torchrun-style script runs as one DDP job per
individual. The worker's ranks follow their children together: every tick they share, in one
small allgather, what the leader's child printed (:mod:`atoll.report_line` lines, or the same
lines in its results file) and which children ended, so that they call ``ctx.report`` at the
same epochs and end alike.

The script keeps its own checkpoint (its format: Atoll never reads it) in a directory per
individual that it is told of; once it holds files, the worker saves a small Atoll checkpoint
of the individual too, so that even a job killed without a word lets the next job continue it
(:mod:`atoll.record.checkpoints`), and the directory goes when the evaluation completes.
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
from atoll.objectives.lines import BadLine, Lines, ResultsFile
from atoll.record.paths import RunPaths
from atoll.report_line import RESULTS_FILE

if TYPE_CHECKING:
    from mpi4py import MPI

    from atoll.config import Config
    from atoll.evaluation.context import Context

TICK = 0.05
"""Seconds at most between two looks at the children (and one allgather on a multi-rank
worker); a rank looks sooner when its child prints a line or ends."""


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
    checkpointed: bool = False
    """The script's checkpoint directory holds files for the first time (the worker then saves
    the individual's Atoll checkpoint, collectively)."""


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
        self.results = objective.results
        self.paths = RunPaths(run_dir.resolve())  # the command runs in another directory

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
        resume = _leaders_word(ctx, ctx.is_leader and _holds_files(
            self.paths.command_checkpoint_dir(ctx.individual_id)))
        with _own_deadline():
            watch, error = self._start(params, env, ctx, resume)
            errors = ctx.comm.allgather(error) if ctx.size > 1 else [error]
            try:
                failed = [r for r, e in enumerate(errors) if e]
                if failed:  # every rank learns it: none is left waiting for the others
                    raise CommandFailed(error or f"the command of worker rank {failed[0]} "
                                        "could not start")
                assert watch is not None
                return self._follow(watch, ctx)
            finally:
                if watch is not None:
                    watch.child.close()

    def _start(self, params: Mapping[str, Any], env: dict[str, str], ctx: Context,
               resume: bool) -> tuple[_Watch | None, str]:
        """This rank's child, or why it could not start (said to the worker's other ranks)."""
        ident = ctx.individual_id
        work_dir, saves = self.paths.work_dir(ident), self.paths.command_checkpoint_dir(ident)
        results_file = work_dir / f"results-rank{ctx.rank}.txt"
        values = {**params, "id": ident, "run_dir": self.paths.run_dir, "work_dir": work_dir,
                  "data_dir": self.data_dir, "python": sys.executable, "checkpoint_dir": saves,
                  "resume_dir": saves if resume else "", "results_file": results_file}
        try:
            work_dir.mkdir(parents=True, exist_ok=True)
            saves.mkdir(parents=True, exist_ok=True)
            argv = [word.format(**values) for word in self.command]
            env.update(ATOLL_CHECKPOINT_DIR=str(saves),
                       ATOLL_RESUME_DIR=str(saves) if resume else "")
            if self.results == "file":
                env[RESULTS_FILE] = str(results_file)
            env.update({k: v.format(**values) for k, v in self.env.items()})
            results = ResultsFile(results_file) if self.results == "file" else None
            child = Child(argv, env, self.cwd, self.paths.command_log(ident, ctx.rank))
            return _Watch(child, ctx.is_leader, results, saves, marked=resume), ""
        except (OSError, ValueError, ChildError) as exc:
            return None, described(exc)

    def _follow(self, watch: _Watch, ctx: Context) -> float:
        """Watch the children until they end, fail, time out or are told to stop."""
        deadline = time.monotonic() + self.eval_timeout if self.eval_timeout else math.inf
        last = dict[str, float]()
        while True:
            watch.child.wait(TICK)
            mine = watch.look(time.monotonic() > deadline)
            ticks = ctx.comm.allgather(mine) if ctx.size > 1 else [mine]
            leader = ticks[0]
            for epoch, metrics in leader.epochs:
                last.update(metrics)
                if ctx.report(epoch, **metrics):
                    if ctx.paused_at is not None:
                        self._keep_for_promotion(ctx, watch, epoch)
                    watch.child.stop(self.stop_grace)
                    return self._stopped_value(watch.last_result(), last)
            if leader.checkpointed:  # from now on a killed job's next job continues it
                ctx.save_checkpoint({"command_checkpoint": str(watch.saves)},
                                    leader.epochs[-1][0])
            self._raise_on_failure(watch.child, ctx.rank, ticks)
            if all(t.exit_code == 0 for t in ticks):
                return self._value(leader.result, last)

    @staticmethod
    def _keep_for_promotion(ctx: Context, watch: _Watch, epoch: int) -> None:
        """Collective. ``asha`` paused the evaluation at ``epoch``: a pause needs a checkpoint
        there, so the worker saves one naming the script's directory (the leader's view of it
        decides) and a promotion gives the script that directory to resume from."""
        if _leaders_word(ctx, ctx.is_leader and _holds_files(watch.saves)):
            ctx.save_checkpoint({"command_checkpoint": str(watch.saves)}, epoch)

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
        verb, where = ("write", f"to the file {RESULTS_FILE} names") \
            if self.results == "file" else ("print", "on stdout")
        raise CommandFailed(f"the command ended without a result: {verb} {wanted}'ATOLL "
                            f"result=<number>' {where} (worker rank 0)")

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


class _Watch:
    """One rank's command as the worker follows it: the child, and on the leader the lines it
    says (on stdout or in its results file) and whether it has saved a checkpoint yet."""

    def __init__(self, child: Child, is_leader: bool, results: ResultsFile | None,
                 saves: Path, marked: bool) -> None:
        self.child, self.is_leader, self.results, self.saves = child, is_leader, results, saves
        self.lines = Lines()
        self.marked = marked or not is_leader  # the leader's word counts

    def look(self, late: bool) -> _Tick:
        """This tick's news (only the leader's lines count)."""
        code = self.child.exit_code()  # first: once known, every line the child said is read
        if not self.is_leader:
            self._read()
            return _Tick([], None, code, "", False)
        try:
            self._read()
        except BadLine as exc:
            return _Tick([], None, code, str(exc), False)
        epochs = self.lines.take_epochs()
        saved = bool(epochs) and not self.marked and _holds_files(self.saves)
        self.marked |= saved
        return _Tick(epochs, self.lines.result, code, "", late, saved)

    def last_result(self) -> float | None:
        """The result line a stopped command may have said on its way out (the leader's)."""
        try:
            self._read()
        except BadLine:
            pass  # its value is then its last metric, as if it had said nothing more
        return self.lines.result

    def _read(self) -> None:
        """Read what the child said since the last look; raises at the first bad line. Stdout
        is always drained; its lines count on the leader when results come on stdout."""
        counted = self.is_leader and self.results is None
        while not self.child.stdout.empty():
            line = self.child.stdout.get()
            if counted:
                self.lines.add(line)
        if self.is_leader and self.results is not None:
            for line in self.results.new_lines():
                self.lines.add(line)


def _holds_files(directory: Path) -> bool:
    try:
        return any(directory.iterdir())
    except OSError:
        return False


def _leaders_word(ctx: Context, value: bool) -> bool:
    """The leader's ``value`` on every rank (one broadcast on a multi-rank worker)."""
    return bool(ctx.comm.bcast(value, root=0)) if ctx.size > 1 else value


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
