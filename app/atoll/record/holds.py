"""Holds on a kept checkpoint: which worker leaders still want it for children to inherit.

An individual may be a parent on several islands at once (pollination copies it, migration
moves it), and each island decides alone when it no longer wants it. So the checkpoint carries
one hold per leader and copy that wants it, an empty file ``RUN_DIR/checkpoints/indID.holds/
jobJJJ-workerWWWWW-vV`` (:meth:`~atoll.record.paths.RunPaths.hold_file`; V: the version of the
copy, so that a leader giving up its hold on one copy never takes away the hold another leader
gave it with a later copy still on its way), and goes with the last hold:

- a leader takes a hold for itself when its evaluation completes, or on a resume for what its
  island restored; it takes one for another leader only while it holds one itself (for the new
  owner of a copy it sends away, before the copy leaves), so the folder of a wanted checkpoint
  is never empty;
- a leader that no longer wants it removes its own hold, then the folder: removing a folder
  succeeds only when it is empty, at once for every process, so exactly the leader that takes
  the last hold away learns it must delete the checkpoint (:func:`release`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from atoll.record.paths import RunPaths

_HOLDER = re.compile(r"job(\d+)-worker(\d+)(-v\d+)?")


def hold(paths: RunPaths, individual_id: int, job: int, worker: int, version: int) -> None:
    """Take a hold on the checkpoint for ``worker`` of ``job``, for the copy ``version``."""
    path = paths.hold_file(individual_id, job, worker, version)
    path.parent.mkdir(exist_ok=True)
    path.touch()


def holds(paths: RunPaths, individual_id: int, job: int, worker: int, version: int) -> bool:
    """Whether ``worker`` of ``job`` holds the checkpoint for the copy ``version`` (another
    leader may have given it a hold with a copy it sent)."""
    return paths.hold_file(individual_id, job, worker, version).exists()


def release(paths: RunPaths, individual_id: int, job: int, worker: int,
            versions: Iterable[int]) -> bool:
    """Give up the holds of ``worker`` of ``job`` on the copies ``versions``; True if they
    were the last: the caller then deletes the checkpoint, which nobody can want any more."""
    for version in versions:
        paths.hold_file(individual_id, job, worker, version).unlink(missing_ok=True)
    return _last(paths, individual_id)


def release_earlier(paths: RunPaths, job: int) -> list[int]:
    """Give up every hold of the jobs before ``job`` (a resume, once this job's leaders took
    theirs); the individuals whose last hold went, in order of id."""
    emptied = []
    for ident, folder in sorted(paths.holds_dirs().items()):
        try:
            held = list(folder.iterdir())
        except FileNotFoundError:  # a leader of this job released the last hold meanwhile
            continue
        for path in held:
            found = _HOLDER.fullmatch(path.name)
            if found is None or int(found[1]) < job:
                path.unlink(missing_ok=True)
        if _last(paths, ident):
            emptied.append(ident)
    return emptied


def forget_unrecorded(paths: RunPaths, recorded: set[int]) -> list[int]:
    """On a resume, before any leader of the job holds anything: remove the holds on the
    checkpoints of individuals that have no row (a job killed between an evaluation's end and
    its row's flush). The resume continues them from those checkpoints, which no earlier
    job's hold may then take away; their ids."""
    forgotten = []
    for ident, folder in sorted(paths.holds_dirs().items()):
        if ident in recorded:
            continue
        try:
            held = list(folder.iterdir())
        except FileNotFoundError:
            continue
        for path in held:
            path.unlink(missing_ok=True)
        _last(paths, ident)
        forgotten.append(ident)
    return forgotten


def _last(paths: RunPaths, individual_id: int) -> bool:
    try:
        os.rmdir(paths.holds_dir(individual_id))
    except OSError:  # another hold is left (or another leader removed the folder first)
        return False
    return True
