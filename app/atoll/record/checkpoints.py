"""Checkpoints: one file per individual under ``RUN_DIR/checkpoints``, its last training state.

Only a worker leader writes, and only the checkpoints of the individual it evaluates. A file is
built in memory and written whole (a temporary file, fsync'd, renamed into place): a kill at any
moment leaves the previous checkpoint or the new one, and a full disk leaves the previous one and
stops the job like any record write (:mod:`atoll.record.full`).

A file is HDF5 (readable with h5py alone) behind a 512-byte user block that holds the SHA-256 of
everything after it. Its root attributes name the run, the individual and the epoch; the state
is the ``state`` tree of :mod:`atoll.record.state`. Its text is fixed-length UTF-8, so it has no
global heap (HDF5 checksums none; a damaged heap header could loop it); a checkpoint written
with variable-length strings (Atoll before) still loads. A file that is damaged (checksum, HDF5) or
foreign (another run or individual) is never loaded: :meth:`CheckpointStore.load` warns, naming
the file, and the evaluation starts from scratch.

A checkpoint is deleted when its evaluation completes, unless children may inherit it
(:class:`Retention`): then it stays while a worker leader of any island holds it (its island's
best individuals keep theirs, and PBT's members).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py

from atoll.individual import Individual, Status, is_copy, replaced_member
from atoll.logs import FILE_ONLY
from atoll.record import full, holds
from atoll.record._h5 import text, written_whole
from atoll.record.paths import RunPaths
from atoll.record.schema import put_attr
from atoll.record.state import read_state, write_state

log = logging.getLogger(__name__)

KIND = "atoll-checkpoint"
FORMAT_VERSION = 1
USER_BLOCK = 512
MAGIC = b"ATOLL-CHECKPOINT sha256 "
_CHUNK = 1 << 20
MB = 1024 * 1024


@dataclass(frozen=True)
class Checkpoint:
    """What a checkpoint file holds."""

    state: Any
    epoch: int


@dataclass(frozen=True)
class Unrecorded:
    """A checkpoint of an individual the record has no row of (its job was killed in the
    middle of its evaluation): what the next job needs to continue it under its id."""

    individual: int
    about: dict[str, Any]
    """The individual as saved with it (:func:`atoll.individual.about_of`)."""


class CheckpointStore:
    """The checkpoints of one run, as its worker leaders keep them.

    ``limit_mb`` (``record.checkpoint_limit_mb``, 0: no limit) bounds the total size of the
    directory: a save that would exceed it is skipped with a warning, and the individual keeps
    its previous checkpoint.
    """

    def __init__(self, paths: RunPaths, run_id: str, limit_mb: float = 0.0) -> None:
        self.paths = paths
        self.run_id = run_id
        self.limit_mb = limit_mb
        self._folder = str(paths.checkpoints_dir)

    def save(self, individual_id: int, epoch: int, state: Any,
             about: Mapping[str, Any] | None = None) -> bool:
        """Write the individual's checkpoint at ``epoch``; False if the limit refused it.

        TypeError names a part of ``state`` that cannot be stored; a full disk raises
        :class:`~atoll.record.full.DiskFull` (reported: the job stops) and keeps the previous
        checkpoint. ``about``: the individual itself (JSON-able), so that a job killed during its
        evaluation, which records no row of it, still lets the next job continue it."""
        path = self.paths.checkpoint_file(individual_id)
        data = self._build(individual_id, epoch, state, about or {})
        if not self._fits(path, len(data)):
            return False
        with full.creating(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            with written_whole(path, fsync=True) as temp, open(temp, "wb") as out:
                out.write(data)
        return True

    def load(self, individual_id: int, map_location: Any = None, quiet: bool = False
             ) -> Checkpoint | None:
        """The individual's checkpoint, or None if there is none or it cannot be trusted (a
        warning then names the file and why; ``quiet``: an info line, as on the ranks of a
        worker other than its leader, which warns)."""
        path = self.paths.checkpoint_file(individual_id)
        if not path.is_file():
            return None
        try:
            return self._read(path, individual_id, map_location)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.log(logging.INFO if quiet else logging.WARNING,
                    "%s: not loaded (%s); individual %d starts from scratch", path,
                    str(exc).splitlines()[0] if str(exc) else type(exc).__name__, individual_id)
            return None

    def discard(self, individual_id: int) -> None:
        """Delete the individual's checkpoint, and a command's own checkpoint directory (and
        its links to a parent's files, if a killed job left them): its evaluation completed
        (ok, failed, pruned). Called after every evaluation, so a run that never kept one pays a
        single access check for it (the folder appears with the first): no stat, whose missing
        folder would raise and catch an exception each time."""
        if not os.access(self._folder, os.F_OK) or not os.path.isdir(self._folder):
            return
        self.paths.checkpoint_file(individual_id).unlink(missing_ok=True)
        shutil.rmtree(self.paths.command_checkpoint_dir(individual_id), ignore_errors=True)
        shutil.rmtree(self.paths.inherited_dir(individual_id), ignore_errors=True)

    def unrecorded(self, recorded: set[int]) -> list[Unrecorded]:
        """Trusted checkpoints of this run whose individuals have no row in the record, in
        order of id (a damaged or foreign one is warned of and left)."""
        found = []
        for ident, path in sorted(self.paths.checkpoint_files().items()):
            if ident in recorded:
                continue
            try:
                self._verify(path)
                with h5py.File(path, "r", locking=False) as f:
                    self._check_owner(f, ident)
                    about = json.loads(text(f.attrs.get("about", "{}")))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("%s: not continued (%s)", path, str(exc).splitlines()[0]
                            if str(exc) else type(exc).__name__)
                continue
            if isinstance(about, dict) and isinstance(about.get("params"), dict):
                found.append(Unrecorded(ident, about))
        return found

    def _build(self, individual_id: int, epoch: int, state: Any,
               about: Mapping[str, Any]) -> memoryview:
        buffer = io.BytesIO()
        with h5py.File(buffer, "w", userblock_size=USER_BLOCK) as f:
            put_attr(f, "kind", KIND)
            f.attrs["format_version"] = FORMAT_VERSION
            put_attr(f, "run_id", self.run_id)
            f.attrs["individual"] = individual_id
            f.attrs["epoch"] = int(epoch)
            f.attrs["saved"] = time.time()
            put_attr(f, "about", json.dumps(dict(about)))
            write_state(f, "state", state)
        data = buffer.getbuffer()
        digest = hashlib.sha256(data[USER_BLOCK:]).hexdigest().encode()
        header = MAGIC + digest + b"\n"
        data[:len(header)] = header
        return data

    def _fits(self, path: Path, size: int) -> bool:
        if self.limit_mb <= 0:
            return True
        others = sum(_size(p) for p in self.paths.checkpoint_files().values() if p != path)
        if others + size <= self.limit_mb * MB:
            return True
        log.warning("%s: not saved: checkpoints would take %.1f MB, over "
                    "record.checkpoint_limit_mb = %g; the previous checkpoint (if any) is kept. "
                    "Raise the limit, or save smaller states", path, (others + size) / MB,
                    self.limit_mb)
        return False

    def _read(self, path: Path, individual_id: int, map_location: Any) -> Checkpoint:
        self._verify(path)
        with h5py.File(path, "r", locking=False) as f:
            self._check_owner(f, individual_id)
            return Checkpoint(read_state(f["state"], map_location), int(f.attrs["epoch"]))

    @staticmethod
    def _verify(path: Path) -> None:
        """The content matches the checksum in the user block (ValueError if not)."""
        with open(path, "rb") as handle:
            header = handle.read(USER_BLOCK)
            digest = hashlib.sha256()
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
        if not header.startswith(MAGIC) or \
                header[len(MAGIC):len(MAGIC) + 64] != digest.hexdigest().encode():
            raise ValueError("damaged: its checksum does not match its content")

    def _check_owner(self, f: h5py.File, individual_id: int) -> None:
        """A checkpoint of this run and this individual (ValueError if not)."""
        kind, run_id = text(f.attrs.get("kind", "")), text(f.attrs.get("run_id", ""))
        owner = int(f.attrs.get("individual", -1))
        if kind != KIND or int(f.attrs.get("format_version", 0)) > FORMAT_VERSION:
            raise ValueError(f"not a checkpoint this Atoll reads ({kind or 'no kind'})")
        if run_id != self.run_id or owner != individual_id:
            raise ValueError(f"foreign: written for run {run_id or 'none'}, individual "
                             f"{owner} (this is run {self.run_id}, individual "
                             f"{individual_id})")


GRACE_SECONDS = 5.0
"""How long a leader still holds a checkpoint it no longer wants: about the time a result takes
to reach the island's other workers, with room to spare."""


class Retention:
    """Which completed evaluations' checkpoints one worker leader wants kept, for children to
    inherit, as holds (:mod:`atoll.record.holds`): a checkpoint goes when no leader of any
    island holds it.

    A leader holds what it evaluated, what the restore gave it on a resume, and the copies
    other islands send it to own (their sender gives it a hold before they leave), while the
    individual is among its island's best ``keep``, among its own best ``emigrants`` (the
    individuals it may send to another island next), or a PBT member not yet replaced. It
    gives up the others ``grace`` seconds after they drop out (another worker of the island that
    has not yet heard of the better results may have just chosen one as a parent; one that is
    wanted again meanwhile stays); the checkpoint is deleted with the last hold, said in an
    info line (the weights, if offered, are kept apart by ``record.top_models``).
    ``keep = 0``: none is kept, every checkpoint goes when its evaluation completes.

    A checkpoint of this leader's evaluation goes no sooner than its row is in the record
    (:meth:`written`): a job killed before that leaves it for the next job to continue from.
    """

    def __init__(self, store: CheckpointStore, keep: int, ranked: Sequence[Individual], *,
                 job: int, worker: int, emigrants: int = 0, pbt: bool = False,
                 grace: float = GRACE_SECONDS, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.store = store
        self.keep = keep
        self.ranked = ranked
        """The island's active usable individuals, best first (the population's, kept live)."""
        self.job, self.worker, self.emigrants = job, worker, emigrants
        self.pbt = pbt
        self.kept: dict[int, set[int]] = {}  # the checkpoints this leader holds: their copies
        self.dropping: dict[int, tuple[set[int], float]] = {}  # held until then, unwanted
        self.grace, self.clock = grace, clock
        self.members: set[int] = set()  # on a PBT island: results no later one replaced
        self.unwritten: set[int] = set()  # completed here, its row not yet in the record
        self.after_row: set[int] = set()  # of those, the ones whose checkpoint goes then

    def adopt(self, restored: Iterable[Individual]) -> None:
        """On a resume: learn the island's restored individuals, hold the checkpoints of those
        this leader owns, and give up what is not wanted. The earlier jobs' holds stay until
        every leader took its own (:func:`release_earlier_holds`)."""
        if not self.keep:
            return
        for ind in sorted(restored, key=lambda i: i.id):
            self._member(ind)
            if ind.owner == self.worker and self.store.paths.checkpoint_file(ind.id).exists():
                self._hold(ind)
        self.prune()

    def finished(self, ind: Individual) -> None:
        """This leader's evaluation of ``ind`` completed (ok, failed or pruned)."""
        self.unwritten.add(ind.id)
        if self.keep and ind.usable and self.store.paths.checkpoint_file(ind.id).exists():
            self._hold(ind)
        else:  # nothing to keep (a command objective's files without a checkpoint go too)
            self.after_row.add(ind.id)

    def written(self, ids: Iterable[int]) -> None:
        """These individuals' rows are in the record: the checkpoints waiting for them go."""
        for ident in ids:
            self.unwritten.discard(ident)
            if ident in self.after_row:
                self.after_row.discard(ident)
                self.store.discard(ident)

    def learn(self, ind: Individual) -> None:
        """The island learned ``ind`` (any worker's): the members change."""
        if self.keep:
            self._member(ind)
            self.prune()

    def leaving(self, migrant: Individual) -> None:
        """A copy of an individual this leader owns is about to leave for another island: its
        new owner there gets a hold, if this leader holds the checkpoint."""
        if migrant.id in self.kept or migrant.id in self.dropping:
            holds.hold(self.store.paths, migrant.id, self.job, migrant.owner, migrant.version)

    def arrived(self, migrant: Individual) -> None:
        """A copy from another island arrived: if it came with a hold for this leader, this
        leader now decides when to give it up."""
        if self.keep and migrant.owner == self.worker and \
                holds.holds(self.store.paths, migrant.id, self.job, self.worker, migrant.version):
            self._keep(migrant.id).add(migrant.version)
            self.prune()

    def _hold(self, ind: Individual) -> None:
        holds.hold(self.store.paths, ind.id, self.job, self.worker, ind.version)
        self._keep(ind.id).add(ind.version)

    def _keep(self, ident: int) -> set[int]:
        """The copies of ``ident`` this leader holds, kept (again, if it was being dropped)."""
        if ident in self.dropping:
            self.kept[ident] = self.dropping.pop(ident)[0]
        return self.kept.setdefault(ident, set())

    def _member(self, ind: Individual) -> None:
        # as PBT's own members (atoll.evolution.pbt): a child paused at a rung replaces its
        # member only once it completes
        if self.pbt and not is_copy(ind) and ind.status != Status.PAUSED:
            self.members.discard(replaced_member(ind))
            self.members.add(ind.id)

    def prune(self) -> None:
        """Start dropping the held checkpoints this leader no longer wants, keep again those
        wanted again, and give up those dropped ``grace`` seconds ago."""
        wanted = {ind.id for ind in self.ranked[:self.keep]} | self.members | self._own_best()
        now = self.clock()
        for ident in sorted(self.kept.keys() - wanted):
            self.dropping[ident] = (self.kept.pop(ident), now + self.grace)
        for ident in sorted(self.dropping.keys() & wanted):
            self._keep(ident)
        self._give_up([ident for ident, (_, due) in self.dropping.items() if due <= now])

    def close(self) -> None:
        """The end of this leader's job: give up at once what it was dropping."""
        self._give_up(list(self.dropping))

    def _give_up(self, idents: list[int]) -> None:
        for ident in sorted(idents):
            versions, _ = self.dropping.pop(ident)
            if holds.release(self.store.paths, ident, self.job, self.worker, versions):
                log.info("checkpoint of individual %d deleted: no island's worker wants it any "
                         "more (among its island's best %d, inherit.keep, among its own best "
                         "%d, migration.migrants, or a PBT member)", ident, self.keep,
                         self.emigrants, extra=FILE_ONLY)
                if ident in self.unwritten:
                    self.after_row.add(ident)
                else:
                    self.store.discard(ident)

    def _own_best(self) -> set[int]:
        """This leader's best ``emigrants`` individuals: the next copies it may send away."""
        found: set[int] = set()
        for ind in self.ranked:
            if len(found) >= self.emigrants:
                break
            if ind.owner == self.worker:
                found.add(ind.id)
        return found


def release_earlier_holds(store: CheckpointStore, job: int) -> list[int]:
    """On a resume, once every leader of ``job`` took its holds: give up the earlier jobs'
    and delete the checkpoints nobody holds any more; their ids."""
    emptied = holds.release_earlier(store.paths, job)
    for ident in emptied:
        store.discard(ident)
    if emptied:
        log.info("%d checkpoint(s) deleted: no island's worker wants them in this job",
                 len(emptied), extra=FILE_ONLY)
    return emptied


def discard_finished(store: CheckpointStore, finished: Iterable[int]) -> list[int]:
    """On a resume, before this job's leaders hold anything: delete the checkpoints of
    evaluations the record holds as finished that no leader holds. A job killed after such a
    row was written and before its checkpoint went leaves them, and nothing wants them; their
    ids."""
    paths = store.paths
    found = set(paths.checkpoint_files()) | set(paths.command_checkpoint_dirs())
    gone = sorted(found.intersection(finished) - set(paths.holds_dirs()))
    for ident in gone:
        store.discard(ident)
    if gone:
        log.info("%d checkpoint(s) of finished evaluations deleted, left by a job that ended "
                 "before it could (individuals %s)", len(gone), ", ".join(map(str, gone)),
                 extra=FILE_ONLY)
    return gone


def checkpoint_bytes(paths: RunPaths) -> tuple[int, int]:
    """(total, largest) size in bytes of the run's checkpoints: for the free-space checks."""
    sizes = [_size(p) for p in paths.checkpoint_files().values()]
    return sum(sizes), max(sizes, default=0)


def _size(path: Path) -> int:
    """A file's size; 0 if another leader just deleted it."""
    try:
        return path.stat().st_size
    except OSError:
        return 0
