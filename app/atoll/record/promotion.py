"""Claims on paused individuals: which worker of an island promotes one (``rule = "asha"``).

Every worker of an island learns of every paused individual and may want to promote the same
one at the same moment. The claim is a hard link of the individual's checkpoint to
``RUN_DIR/checkpoints/indID.promoting`` (:meth:`RunPaths.promotion_claim`): creating a link is
atomic and fails if the name exists, so of the workers that try, exactly one wins, and it fails
too if the checkpoint is gone (the individual finished). The link pins the checkpoint as it was
claimed, so the winner checks that it holds the epoch it decided on: a worker that learned of
a later pause of the individual only after deciding does not promote it from the wrong rung.
Where the file system refuses hard links, the claim is an empty file made with ``O_EXCL``, and
the winner reads the checkpoint itself: no other worker writes it while the claim is held.

The claim is held until the promoted evaluation ends (:func:`release`); a claim left by a job
that was killed meanwhile marks an evaluation the next job continues (:func:`held`).
"""

from __future__ import annotations

from typing import Literal

import h5py

from atoll.record.exclusive import make_exclusive
from atoll.record.paths import RunPaths

Claimed = Literal["won", "taken", "gone", "stale"]
"""won: this worker promotes it; taken: another worker does; gone: it has no checkpoint (it
finished); stale: its checkpoint is at another epoch than the claimer thought (try again once
the claimer has learned its newer rung)."""


def claim(paths: RunPaths, individual_id: int, epoch: int) -> Claimed:
    """Claim the paused individual ``individual_id`` to continue it from its checkpoint at
    ``epoch``."""
    target = paths.promotion_claim(individual_id)
    checkpoint = paths.checkpoint_file(individual_id)
    try:
        linked = make_exclusive(target, checkpoint, "")
    except FileExistsError:
        return "taken"
    except FileNotFoundError:
        return "gone"
    try:
        with h5py.File(target if linked else checkpoint, "r", locking=False) as f:
            saved = int(f.attrs["epoch"])
    except (OSError, KeyError, ValueError):
        saved = None  # damaged: the evaluation warns when it loads it and starts from scratch
    if saved is not None and saved != epoch:
        target.unlink(missing_ok=True)
        return "stale"
    return "won"


def release(paths: RunPaths, individual_id: int) -> None:
    """The promoted evaluation ended (however): give up the claim."""
    paths.promotion_claim(individual_id).unlink(missing_ok=True)


def held(paths: RunPaths) -> set[int]:
    """Ids claimed and never released: their promotion was cut short by a killed job."""
    if not paths.checkpoints_dir.is_dir():
        return set()
    return {int(p.stem[3:]) for p in paths.checkpoints_dir.glob("ind*.promoting")
            if p.stem[3:].isdigit()}
