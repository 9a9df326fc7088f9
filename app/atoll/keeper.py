"""The best individuals' weights: kept on disk for the top N, never pickled.

Each worker leader keeps the weights of its own best ``limit`` individuals (a superset of the
run's best ``limit``); when a job ends, rank 0 removes every file outside the run's top
``limit``. Files are HDF5, one dataset per tensor (see :mod:`atoll.weights`).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from atoll.record.paths import RunPaths


class TopWeights:
    """One leader's best ``limit`` weight files under ``RUN_DIR/models``."""

    def __init__(self, paths: RunPaths, limit: int) -> None:
        self.paths = paths
        self.limit = limit
        self._worst_first: list[tuple[float, int]] = []  # (-loss, id): a max-heap on loss

    def offer(self, individual_id: int, loss: float, state_dict: Mapping[str, Any]
              ) -> Path | None:
        """Store the weights if they rank among this leader's best; returns the file or None."""
        if self.limit <= 0 or loss != loss:  # no keeping, or a NaN loss
            return None
        if len(self._worst_first) >= self.limit and -self._worst_first[0][0] <= loss:
            return None
        from atoll.weights import save_state_dict

        path = self.paths.model_file(individual_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_state_dict(path, state_dict, {"individual": individual_id, "loss": loss})
        heapq.heappush(self._worst_first, (-loss, individual_id))
        if len(self._worst_first) > self.limit:
            _, dropped = heapq.heappop(self._worst_first)
            self.paths.model_file(dropped).unlink(missing_ok=True)
        return path


def prune_to_top(paths: RunPaths, losses: Mapping[int, float], limit: int) -> list[int]:
    """Delete weight files outside the run's best ``limit``; returns the ids kept."""
    files = paths.model_files()
    ranked = sorted((losses.get(i, float("inf")), i) for i in files)
    keep = [i for _, i in ranked[:limit]]
    for ind_id, path in files.items():
        if ind_id not in keep:
            path.unlink(missing_ok=True)
    return keep
