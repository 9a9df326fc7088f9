"""A command objective: any training script, run once per individual on each rank of a worker.

Each rank starts the command (``[objective] command``, placeholders filled) as a child process
with torchrun's variables for a world that is the worker's ranks, and without the MPI
launcher's (:mod:`atoll.objectives.launch_env`): an unchanged torchrun-style script runs as one
DDP job per individual. The worker's ranks follow their children together: every tick they
share, in one small allgather, what the leader's child printed (:mod:`atoll.report_line` lines,
or the same lines in its results file) and which children ended, so that they call
``ctx.report`` at the same epochs and end alike.

The script keeps its own checkpoint (its format: Atoll never reads it) in a directory per
individual that it is told of; once it holds files, the worker saves a small Atoll checkpoint
of the individual too, so that even a job killed without a word lets the next job continue it
(:mod:`atoll.record.checkpoints`), and the directory goes when the evaluation completes, unless
children may inherit it: then the Atoll checkpoint is saved again at its last epoch, and a bred
child that inherits starts its script with hard links to the parent's files to resume from,
told whose they are (``ATOLL_INHERIT_FROM``, ``ATOLL_INHERIT_EPOCH``).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from atoll.errors import ObjectiveError, described
from atoll.objectives.child import Child, ChildError
from atoll.objectives.launch_env import command_environment
from atoll.objectives.lines import BadLine, Lines, ResultsFile
from atoll.record.links import holds_files, link_tree
from atoll.record.paths import RunPaths
from atoll.report_line import RESULTS_FILE

if TYPE_CHECKING:
    from atoll.config import Config
    from atoll.evaluation.context import Context

_T = TypeVar("_T")

log = logging.getLogger(__name__)

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
    waited: bool = False
    """A partner's command failed more than ``stop_grace`` seconds ago (the leader's clock)."""


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
        self.inherits = config.inherits  # bred children may start from a parent's files
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
        own = self.paths.command_checkpoint_dir(ctx.individual_id)
        resume = own if _leaders_word(ctx, ctx.is_leader and holds_files(own)) else None
        offered = self._offer_inherited(ctx) if resume is None and self.inherits else None
        try:
            with _own_deadline(), command_environment(
                    os.environ, ctx.comm, f"atoll-ind{ctx.individual_id}",
                    ctx.node) as env:
                return self._run(params, env, ctx, resume or offered)
        finally:
            if offered is not None and ctx.is_leader:
                shutil.rmtree(offered, ignore_errors=True)

    def _run(self, params: Mapping[str, Any], env: dict[str, str], ctx: Context,
             resume: Path | None) -> float:
        """Start every rank's command, then follow them to their end (collective)."""
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

    def _offer_inherited(self, ctx: Context) -> Path | None:
        """Collective. For a bred child that inherits and has no files of its own: its
        parent's kept script checkpoint, linked into a directory of the child's own (the script
        never sees the parent's files, and no deletion of them can reach it), or None."""
        ctx.load_checkpoint()  # the parent's small Atoll checkpoint: its lineage, its epoch
        lineage = ctx.inherited
        if lineage is None:
            return None
        offered = self.paths.inherited_dir(ctx.individual_id)
        problem = _leaders_word(ctx, link_tree(
            self.paths.command_checkpoint_dir(lineage.individual), offered)
            if ctx.is_leader else "")
        if problem:
            ctx.decline_inherited(problem)
            return None
        return offered

    def _start(self, params: Mapping[str, Any], env: dict[str, str], ctx: Context,
               resume: Path | None) -> tuple[_Watch | None, str]:
        """This rank's child, or why it could not start (said to the worker's other ranks)."""
        ident = ctx.individual_id
        work_dir, saves = self.paths.work_dir(ident), self.paths.command_checkpoint_dir(ident)
        results_file = work_dir / f"results-rank{ctx.rank}.txt"
        lineage = ctx.inherited if resume is not None and resume != saves else None
        inherited = {"inherit_from": "" if lineage is None else str(lineage.individual),
                     "inherit_epoch": "" if lineage is None else str(lineage.epoch)}
        values = {**params, "id": ident, "run_dir": self.paths.run_dir, "work_dir": work_dir,
                  "data_dir": self.data_dir, "python": sys.executable, "checkpoint_dir": saves,
                  "resume_dir": resume or "", "results_file": results_file, **inherited}
        try:
            work_dir.mkdir(parents=True, exist_ok=True)
            saves.mkdir(parents=True, exist_ok=True)
            argv = [word.format(**values) for word in self.command]
            env.update(ATOLL_CHECKPOINT_DIR=str(saves), ATOLL_RESUME_DIR=str(resume or ""),
                       ATOLL_INHERIT_FROM=inherited["inherit_from"],
                       ATOLL_INHERIT_EPOCH=inherited["inherit_epoch"])
            if self.results == "file":
                env[RESULTS_FILE] = str(results_file)
            env.update({k: v.format(**values) for k, v in self.env.items()})
            results = ResultsFile(results_file) if self.results == "file" else None
            child = Child(argv, env, self.cwd, self.paths.command_log(ident, ctx.rank))
            return _Watch(child, ctx.is_leader, results, saves, marked=resume == saves), ""
        except (OSError, ValueError, ChildError) as exc:
            return None, described(exc)

    def _follow(self, watch: _Watch, ctx: Context) -> float:
        """Watch the children until they end, fail, time out or are told to stop."""
        deadline = time.monotonic() + self.eval_timeout if self.eval_timeout else math.inf
        partner_deadline = math.inf  # set once a rank's command has failed: the leader's wait
        last = dict[str, float]()
        latest = 0  # the last epoch reported
        while True:
            watch.child.wait(TICK)
            now = time.monotonic()
            mine = watch.look(now > deadline, now > partner_deadline)
            ticks = ctx.comm.allgather(mine) if ctx.size > 1 else [mine]
            leader = ticks[0]
            for epoch, metrics in leader.epochs:
                last.update(metrics)
                latest = epoch
                if ctx.report(epoch, **metrics):
                    if ctx.paused_at is not None:  # a pause needs a checkpoint there
                        _mark(ctx, watch, epoch)
                    watch.child.stop(self.stop_grace)
                    return self._stopped_value(watch.last_result(), last)
            if leader.checkpointed:  # from now on a killed job's next job continues it
                ctx.save_checkpoint(_marker(watch), latest)
            failed = [r for r, t in enumerate(ticks) if t.exit_code not in (None, 0)]
            if failed and not (leader.bad_line or leader.timed_out):
                if leader.exit_code is not None or leader.waited:
                    if leader.result is not None:
                        return self._kept_result(watch, ctx, ticks, latest)
                else:  # a partner crashing on its way out may end before the leader's result
                    partner_deadline = min(partner_deadline, now + self.stop_grace)
                    failed = []  # not yet a failure
            self._raise_on_failure(watch.child, ctx.rank, ticks, failed)
            if all(t.exit_code == 0 for t in ticks) or leader.exit_code == 0 and leader.waited:
                if ticks[ctx.rank].exit_code is None:  # still running after rank 0's ended
                    log.warning("individual %d: the command of worker rank %d was still "
                                "running objective.stop_grace = %g s after rank 0's had ended: "
                                "stopped", ctx.individual_id, ctx.rank, self.stop_grace)
                    watch.child.stop(self.stop_grace)
                if self.inherits:  # children may start from its files once it completed
                    _mark(ctx, watch, latest)
                return self._value(leader.result, last)
            if leader.exit_code == 0:  # its value is in: the others get stop_grace to end
                partner_deadline = min(partner_deadline, now + self.stop_grace)
                continue  # no stop check: it would record a finished evaluation interrupted
            if ctx.stop_requested():  # between two lines: the script hears of it at once
                watch.child.stop(self.stop_grace)
                return self._stopped_value(watch.last_result(), last)

    def _kept_result(self, watch: _Watch, ctx: Context, ticks: list[_Tick],
                     latest: int) -> float:
        """Collective. The leader's result line, though some rank's command failed: a partner
        lost mid-training leaves a DDP leader no result to say, so a failure around a said
        result is a crash on the way out (torch's gloo teardown aborts a finished script now
        and then, on any rank). Every rank whose command failed says so in one line; a command
        still running (the leader ``stop_grace`` seconds after a partner's failure) is stopped."""
        code = ticks[ctx.rank].exit_code
        if code not in (None, 0):
            log.warning("individual %d: the command of worker rank %d %s after the leader's "
                        "result line; the result counts%s", ctx.individual_id, ctx.rank,
                        _ended(code), _quoted(watch.child))
        elif code is None:
            watch.child.stop(self.stop_grace)
        if self.inherits:
            _mark(ctx, watch, latest)
        result = ticks[0].result
        assert result is not None
        return result

    def _raise_on_failure(self, child: Child, rank: int, ticks: list[_Tick],
                          failed: list[int]) -> None:
        """Every rank whose child failed (``failed``) says why; the others fail for the first
        such rank."""
        leader = ticks[0]
        if leader.bad_line:
            raise CommandFailed(f"the command printed a bad line: {leader.bad_line}")
        if leader.timed_out:
            raise CommandFailed(f"the command ran past search.eval_timeout = "
                                f"{self.eval_timeout:g} s and was killed{_quoted(child)}")
        if rank in failed:
            raise CommandFailed(f"the command {_ended(ticks[rank].exit_code)}{_quoted(child)}")
        if failed:  # every rank leaves, none ticks on alone
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


class _Watch:
    """One rank's command as the worker follows it: the child, and on the leader the lines it
    says (on stdout or in its results file) and whether it has saved a checkpoint yet."""

    def __init__(self, child: Child, is_leader: bool, results: ResultsFile | None,
                 saves: Path, marked: bool) -> None:
        self.child, self.is_leader, self.results, self.saves = child, is_leader, results, saves
        self.lines = Lines()
        self.marked = marked or not is_leader  # the leader's word counts

    def look(self, late: bool, waited: bool) -> _Tick:
        """This tick's news (only the leader's lines and clock count)."""
        code = self.child.exit_code()  # first: once known, every line the child said is read
        if not self.is_leader:
            self._read()
            return _Tick([], None, code, "", False)
        try:
            self._read()
        except BadLine as exc:
            return _Tick([], None, code, str(exc), False)
        epochs = self.lines.take_epochs()
        saved = bool(epochs) and not self.marked and holds_files(self.saves)
        self.marked |= saved
        return _Tick(epochs, self.lines.result, code, "", late, saved, waited)

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


def _leaders_word(ctx: Context, value: _T) -> _T:
    """The leader's ``value`` on every rank (one broadcast on a multi-rank worker)."""
    return ctx.comm.bcast(value, root=0) if ctx.size > 1 else value  # type: ignore[no-any-return]


def _marker(watch: _Watch) -> dict[str, str]:
    """The state of the individual's Atoll checkpoint: only where the script keeps its own."""
    return {"command_checkpoint": str(watch.saves)}


def _mark(ctx: Context, watch: _Watch, epoch: int) -> None:
    """Collective. Save the individual's Atoll checkpoint at ``epoch`` if the script's
    directory holds files (the leader's view decides): a paused individual is then continued
    from there, and a kept one is inherited from, its children starting after ``epoch``."""
    if _leaders_word(ctx, ctx.is_leader and holds_files(watch.saves)):
        ctx.save_checkpoint(_marker(watch), epoch)


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
