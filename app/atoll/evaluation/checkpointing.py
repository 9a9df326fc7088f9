"""The checkpoint calls of one evaluation (``ctx.save_checkpoint``, ``ctx.load_checkpoint``).

Both are collective over the worker: the ranks first meet (:func:`atoll.collective.gather_within`,
so a call on some ranks only is one error naming the missing ranks within
``distributed.timeout``, never a hang), then the leader writes (every DDP replica holds the same
state) or every rank reads, and all ranks end with the same answer.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from atoll.collective import gather_within
from atoll.errors import ObjectiveError, described
from atoll.record import full
from atoll.record.checkpoints import Checkpoint

if TYPE_CHECKING:
    from atoll.evaluation.context import WorkerServices

log = logging.getLogger(__name__)


class CheckpointCalls:
    """One rank's checkpoint calls for one individual; counting them tells a call from a
    left-over of an earlier one that some ranks made alone."""

    def __init__(self, services: WorkerServices, individual_id: int,
                 about: Mapping[str, Any] | None = None) -> None:
        self.services = services
        self.individual_id = individual_id
        self.about = about or {}
        self.calls = 0

    def save(self, state: Any, epoch: int) -> bool:
        """Write ``state`` as the checkpoint at ``epoch`` (leader); whether it was written."""
        store, comm = self.services.checkpoints, self.services.comm
        if store is None:
            return False
        call = f"ctx.save_checkpoint(epoch={epoch})"
        epochs = self._meet(call, int(epoch))
        if len(set(epochs)) > 1:
            raise ObjectiveError(f"{call}: the worker's ranks saved different epochs ("
                                 + ", ".join(f"rank {r}: {e}" for r, e in enumerate(epochs))
                                 + "); call it with the same epoch on every rank")
        outcome: tuple[str, str] | None = None
        if comm.Get_rank() == 0:
            outcome = self._write(state, int(epoch))
        kind, text = self._share(call, outcome)[0]
        if kind == "error":
            raise ObjectiveError(text)
        return kind == "saved"

    def load(self, map_location: Any = None) -> Checkpoint | None:
        """The last checkpoint of this individual (on every rank), or None."""
        store, comm = self.services.checkpoints, self.services.comm
        if store is None:
            return None
        call = "ctx.load_checkpoint()"
        self._meet(call, None)
        found, problem = None, ""
        try:  # whatever happens, every rank hears of it below: none waits for ever
            found = store.load(self.individual_id, map_location, quiet=comm.Get_rank() > 0)
        except Exception as exc:  # noqa: BLE001 - shared with every rank, raised below
            problem = described(exc)
        outcomes = self._share(call, (None if found is None else found.epoch, problem))
        problems = [f"rank {rank}: {text}" for rank, (_, text) in enumerate(outcomes) if text]
        if problems:
            raise ObjectiveError(f"{call}: {'; '.join(problems)}")
        epochs = [epoch for epoch, _ in outcomes]
        if len(set(epochs)) == 1:
            return found
        log.warning("individual %d: the worker's ranks read different checkpoints (epochs by "
                    "rank: %s); it starts from scratch", self.individual_id, epochs)
        return None

    def _meet(self, call: str, item: Any) -> list[Any]:
        """Every rank's ``item`` once all ranks called (within ``distributed.timeout``)."""
        self.calls += 1
        return gather_within(self.services.comm, (self.individual_id, self.calls), item,
                             self.services.group.timeout, call, ObjectiveError)

    def _share(self, call: str, item: Any) -> list[Any]:
        """Every rank's ``item`` after work that may take long (a big write or read)."""
        return gather_within(self.services.comm, (self.individual_id, self.calls, "done"), item,
                             math.inf, call, ObjectiveError)

    def _write(self, state: Any, epoch: int) -> tuple[str, str]:
        """(saved | refused | disk full | error, message) of the leader's write."""
        assert self.services.checkpoints is not None
        try:
            saved = self.services.checkpoints.save(self.individual_id, epoch, state, self.about)
        except full.DiskFull as exc:  # reported: the job stops at the next ctx.report
            log.warning("individual %d: checkpoint at epoch %d not saved (%s); the previous one "
                        "is kept", self.individual_id, epoch, exc)
            return "disk full", str(exc)
        except Exception as exc:  # noqa: BLE001 - shared with every rank, raised there
            return "error", f"ctx.save_checkpoint(epoch={epoch}): {described(exc)}"
        return ("saved" if saved else "refused"), ""
