"""Errors in collective code: every rank of a communicator raises the same one, none waits.

A step that runs on rank 0 only (planning a job, reading the record) or on every rank (loading
an objective, reading a data set) may fail on some ranks and not on others. Ranks that went on
would then wait forever in the next collective call. :func:`on_root` and :func:`on_all` share
the outcome instead: a user error (:class:`AtollError` or :class:`OSError`) becomes the same
one-line error on every rank; an unexpected exception keeps its traceback where it happened and
is a :class:`PeerError` everywhere else.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from atoll.errors import AtollError, described

if TYPE_CHECKING:
    from mpi4py import MPI

T = TypeVar("T")
Outcome = tuple[bool, str]
"""(a user error, its one-line message), as one rank tells the others."""


class PeerError(RuntimeError):
    """Another rank failed with an unexpected error (a bug); its message is attached."""


def on_root(comm: MPI.Comm, action: Callable[[], T], error: type[AtollError] = AtollError
            ) -> T:
    """Run ``action`` on rank 0 and give every rank its result, or raise its error everywhere.

    A user error is raised on every rank as ``error`` with the same message.
    """
    result: Any = None
    outcome: Outcome | None = None
    caught: Exception | None = None
    if comm.Get_rank() == 0:
        try:
            result = action()
        except Exception as exc:  # noqa: BLE001 - shared below, then raised on every rank
            caught, outcome = exc, _outcome(exc)
    result, outcome = comm.bcast((result, outcome), root=0)
    _raise_first([outcome] if outcome else [], caught, error)
    return result


def on_all(comm: MPI.Comm, action: Callable[[], T], error: type[AtollError] = AtollError
           ) -> T:
    """Run ``action`` on every rank; if it fails anywhere, every rank raises the first error
    (in rank order) as ``error``."""
    result: Any = None
    outcome: Outcome | None = None
    caught: Exception | None = None
    try:
        result = action()
    except Exception as exc:  # noqa: BLE001 - shared below, then raised on every rank
        caught, outcome = exc, _outcome(exc)
    _raise_first([o for o in comm.allgather(outcome) if o is not None], caught, error)
    return result


def one_line(exc: BaseException) -> str:
    """The first line of an error, with the file an OSError is about."""
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror or exc}"
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _outcome(exc: Exception) -> Outcome:
    if isinstance(exc, (AtollError, OSError)):
        return True, one_line(exc)
    return False, described(exc)


def _raise_first(outcomes: list[Outcome], caught: Exception | None,
                 error: type[AtollError]) -> None:
    if not outcomes:
        return
    user, message = outcomes[0]
    if user:
        raise error(message)
    if caught is not None:
        raise caught
    raise PeerError(f"another rank failed: {message}")


_ARRIVE_TAG = 7301
_VERDICT_TAG = 7302
_pending_sends: list[Any] = []


def gather_within(comm: MPI.Comm, key: Any, item: Any, seconds: float, call: str,
                  error: type[AtollError] = AtollError) -> list[Any]:
    """Every rank's ``item`` in rank order, on every rank of ``comm``: a collective call that
    fails instead of hanging when some ranks do not make it.

    A rank that has not arrived ``seconds`` after the leader did (``math.inf``: no limit) is
    named in one ``error`` raised on the ranks that arrived; a follower whose leader does not
    answer within twice ``seconds`` raises too. ``key`` (plain data, e.g. the individual and a
    count of calls) tells this call from one that some ranks made alone before: such left-over
    messages are dropped. Waits with a gentle back-off (an evaluation time limit interrupts it);
    small plain data only (pickled by mpi4py, never persisted).
    """
    if comm.Get_size() == 1:
        return [item]
    leader = comm.Get_rank() == 0
    deadline = time.monotonic() + (2 * seconds if not leader else seconds)
    if not leader:
        _send(comm, (key, item), 0, _ARRIVE_TAG)
        answer = _receive(comm, [0], _VERDICT_TAG, key, deadline)
        if not answer:
            raise error(f"{call}: rank 0 (the worker's leader) did not call it within "
                        f"{2 * seconds:g} s (twice distributed.timeout); call it on every rank "
                        "of the worker")
        items, missing = answer[0]
    else:
        arrived = _receive(comm, range(1, comm.Get_size()), _ARRIVE_TAG, key, deadline)
        missing = [r for r in range(1, comm.Get_size()) if r not in arrived]
        items = None if missing else [item, *(arrived[r] for r in range(1, comm.Get_size()))]
        for rank in arrived:
            _send(comm, (key, (items, missing)), rank, _VERDICT_TAG)
    if missing:
        raise error(f"{call}: rank{'s' if len(missing) > 1 else ''} "
                    f"{', '.join(map(str, missing))} of the worker did not call it within "
                    f"{seconds:g} s (distributed.timeout); call it on every rank of the worker")
    return list(items)


def _send(comm: MPI.Comm, message: Any, dest: int, tag: int) -> None:
    """Send without waiting for the receiver (which may never come); finished sends are
    forgotten at the next send."""
    from mpi4py import MPI

    _pending_sends.append(comm.isend(message, dest=dest, tag=tag))
    _pending_sends[:] = [r for r in _pending_sends if not MPI.Request.Test(r)]


def _receive(comm: MPI.Comm, sources: Iterable[int], tag: int, key: Any, deadline: float
             ) -> dict[int, Any]:
    """The items of the ``key`` messages that ``sources`` sent by ``deadline``, by source;
    messages of other keys (calls some ranks made alone) are dropped."""
    from atoll.backoff import Backoff

    waiting, got = set(sources), {}
    backoff = Backoff()
    while waiting:
        for source in sorted(waiting):
            message = comm.improbe(source=source, tag=tag)
            if message is None:
                continue
            found, item = message.recv()
            if found == key:
                got[source] = item
                waiting.discard(source)
            backoff.reset()
        if waiting:
            if time.monotonic() >= deadline:
                break
            backoff.wait()
    return got
