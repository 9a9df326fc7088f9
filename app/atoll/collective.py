"""Errors in collective code: every rank of a communicator raises the same one, none waits.

A step that runs on rank 0 only (planning a job, reading the record) or on every rank (loading
an objective, reading a data set) may fail on some ranks and not on others. Ranks that went on
would then wait forever in the next collective call. :func:`on_root` and :func:`on_all` share
the outcome instead: a user error (:class:`AtollError` or :class:`OSError`) becomes the same
one-line error on every rank; an unexpected exception keeps its traceback where it happened and
is a :class:`PeerError` everywhere else.
"""

from __future__ import annotations

from collections.abc import Callable
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
