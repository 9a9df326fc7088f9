"""Paused individuals on resume (``pruning.rule = "asha"``): which ones wait for promotion on
an island, and which ones a killed job was promoting.

An individual's evaluation may be recorded in several parts, in several worker files of one
job or of several: paused at a rung, promoted and paused again at the next, then finished (or
interrupted by the end of a job). Its last part (:func:`atoll.record.reader.last_parts`) tells
what it is now.
"""

from __future__ import annotations

from collections.abc import Set

import numpy as np

from atoll.engine.restore import recorded
from atoll.engine.topology import Layout
from atoll.individual import Individual, Status
from atoll.record.reader import last_parts
from atoll.space import Space


def to_resume(individuals: np.ndarray, cut: Set[int]) -> np.ndarray:
    """The last parts of the evaluations a resume continues as interrupted ones: the
    interrupted, and the paused ones in ``cut`` (claimed for promotion by a job that was
    killed: their checkpoints may hold epochs past their rung, which no row records)."""
    rows = last_parts(individuals).copy()
    cut_rows = (rows["status"] == int(Status.PAUSED)) & np.isin(rows["id"], list(cut))
    rows["status"][cut_rows] = int(Status.INTERRUPTED)
    return rows[rows["status"] == int(Status.INTERRUPTED)]


def paused_rows(individuals: np.ndarray, cut: Set[int]) -> np.ndarray:
    """The last parts of the run's paused individuals (on any island), except the ``cut``
    ones."""
    rows = last_parts(individuals)
    return rows[(rows["status"] == int(Status.PAUSED)) & ~np.isin(rows["id"], list(cut))]


def paused_on(paused: np.ndarray, space: Space, layout: Layout, island: int,
              kept: Set[int]) -> list[Individual]:
    """The individuals of ``paused`` (:func:`paused_rows`) on ``island`` of the new layout
    (old island ``i`` becomes ``i % islands``; paused ones never migrate) that still have a
    checkpoint (``kept``: the ids of those that do), in order of id."""
    rows = paused[(paused["island"] % layout.islands == island)
                  & np.isin(paused["id"], list(kept))]
    found = recorded(rows, space)
    for ind in found:
        ind.island = island
    return found


def without_checkpoint(paused: np.ndarray, kept: Set[int]) -> list[int]:
    """Ids of the individuals of ``paused`` whose checkpoint is gone, as after a user deleted
    ``RUN_DIR/checkpoints``: they can never be promoted."""
    return sorted(int(i) for i in paused["id"] if int(i) not in kept)
