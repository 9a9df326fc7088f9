"""The checkpoint calls of one evaluation (``ctx.save_checkpoint``, ``ctx.load_checkpoint``).

Both are collective over the worker: the ranks first meet where ``ctx.report`` meets
(:class:`atoll.evaluation.meeting.Meeting`, so a call on some ranks only, or with different
epochs, is one error naming the ranks within ``distributed.timeout``, never a hang, and the next
call on every rank works again), then the leader writes (every DDP replica holds the same state)
or every rank reads, and all ranks end with the same answer.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from atoll.collective import gather_within
from atoll.errors import ObjectiveError, described
from atoll.individual import NO_EPOCH, NO_PARENT
from atoll.record import full
from atoll.record.checkpoints import Checkpoint, CheckpointStore

if TYPE_CHECKING:
    from atoll.evaluation.context import WorkerServices

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Inherited:
    """Where an evaluation's training started: another individual's checkpoint at ``epoch``."""

    individual: int
    epoch: int


def lineage_of(about: Mapping[str, Any]) -> Inherited | None:
    """The lineage an individual's :func:`atoll.individual.about_of` carries from an earlier
    part of its evaluation (None: it trains from scratch, or has not loaded what it was bred
    to inherit)."""
    parent = int(about.get("inherit_from", NO_PARENT))
    epoch = int(about.get("inherit_epoch", NO_EPOCH))
    return Inherited(parent, epoch) if parent != NO_PARENT and epoch != NO_EPOCH else None


class CheckpointCalls:
    """One rank's checkpoint calls for one individual; the calls every rank made are counted
    (the same count on every rank) to tell one call's answers from another's."""

    def __init__(self, services: WorkerServices, individual_id: int,
                 about: Mapping[str, Any] | None = None) -> None:
        self.services = services
        self.individual_id = individual_id
        self.about = dict(about or {})
        self.calls = 0
        self.inherit_from = int(self.about.get("inherit_from", NO_PARENT))
        self.inherited: Inherited | None = lineage_of(self.about)
        """The lineage of this evaluation: set when a load took another individual's
        checkpoint, kept from an earlier part of a continued one."""

    def save(self, state: Any, epoch: int) -> bool:
        """Write ``state`` as the checkpoint at ``epoch`` (leader); whether it was written."""
        store, comm = self.services.checkpoints, self.services.comm
        if store is None:
            return False
        call = f"ctx.save_checkpoint(epoch={int(epoch)})"
        with self.services.together(call):
            outcome: tuple[str, str] | None = None
            if comm.Get_rank() == 0:
                outcome = self._write(state, int(epoch))
            kind, text = self._share(call, outcome)[0]
        if kind == "error":
            raise ObjectiveError(text)
        return kind == "saved"

    def load(self, map_location: Any = None) -> Checkpoint | None:
        """The last checkpoint of this individual, else the one it inherits (on every rank),
        or None."""
        store, comm = self.services.checkpoints, self.services.comm
        if store is None:
            return None
        call = "ctx.load_checkpoint()"
        with self.services.together(call):
            found, problem, inherited = None, "", self.inherited
            try:  # whatever happens, every rank hears of it below: none waits for ever
                found, inherited = self._read(store, map_location, comm.Get_rank() > 0)
            except Exception as exc:  # noqa: BLE001 - shared with every rank, raised below
                problem = described(exc)
            outcomes = self._share(call, (None if found is None else found.epoch, problem))
        problems = [f"rank {rank}: {text}" for rank, (_, text) in enumerate(outcomes) if text]
        if problems:
            raise ObjectiveError(f"{call}: {'; '.join(problems)}")
        epochs = [epoch for epoch, _ in outcomes]
        if len(set(epochs)) == 1:
            self._inherit(inherited)
            return found
        log.warning("individual %d: the worker's ranks read different checkpoints (epochs by "
                    "rank: %s); it starts from scratch", self.individual_id, epochs)
        self._inherit(None)
        return None

    def _read(self, store: CheckpointStore, map_location: Any, quiet: bool
              ) -> tuple[Checkpoint | None, Inherited | None]:
        """(its own checkpoint, its lineage so far), else (the inherited one, where from)."""
        found = store.load(self.individual_id, map_location, quiet=quiet)
        if found is not None or self.inherit_from == NO_PARENT:
            return found, self.inherited if found is not None else None
        found = store.load(self.inherit_from, map_location, quiet=quiet)
        if found is None:
            log.log(logging.INFO if quiet else logging.WARNING,
                    "individual %d: the checkpoint of individual %d, which it was to inherit, "
                    "is not kept (any more); it starts from scratch", self.individual_id,
                    self.inherit_from)
            return None, None
        return found, Inherited(self.inherit_from, found.epoch)

    def decline(self, reason: str) -> None:
        """The objective does not use the inherited state (e.g. its shapes differ)."""
        if self.inherited is None:
            return
        if self.services.comm.Get_rank() == 0:
            log.warning("individual %d: not inheriting individual %d's checkpoint (%s); it "
                        "trains from scratch%s", self.individual_id, self.inherited.individual,
                        reason, self.services.shape_hint)
        self._inherit(None)

    def _inherit(self, inherited: Inherited | None) -> None:
        """Remember the lineage, and keep it with this individual's own checkpoints."""
        self.inherited = inherited
        self.about["inherit_from"] = NO_PARENT if inherited is None else inherited.individual
        self.about["inherit_epoch"] = NO_EPOCH if inherited is None else inherited.epoch

    def _share(self, call: str, item: Any) -> list[Any]:
        """Every rank's ``item`` after work that may take long (a big write or read): called
        only once every rank met at ``call``, so it waits without a limit."""
        self.calls += 1
        return gather_within(self.services.comm, (self.individual_id, self.calls), item,
                             math.inf, call, ObjectiveError)

    def _write(self, state: Any, epoch: int) -> tuple[str, str]:
        """(saved | refused | disk full | error, message) of the leader's write."""
        assert self.services.checkpoints is not None
        try:
            if self.services.before_checkpoint is not None:
                self.services.before_checkpoint()
            saved = self.services.checkpoints.save(self.individual_id, epoch, state, self.about)
        except full.DiskFull as exc:  # reported: the job stops at the next ctx.report
            log.warning("individual %d: checkpoint at epoch %d not saved (%s); the previous one "
                        "is kept", self.individual_id, epoch, exc)
            return "disk full", str(exc)
        except Exception as exc:  # noqa: BLE001 - shared with every rank, raised there
            return "error", f"ctx.save_checkpoint(epoch={epoch}): {described(exc)}"
        return ("saved" if saved else "refused"), ""
