"""What one worker knows of its island: every individual once, and the active ones ranked.

Individuals are keyed by id. A copy with a higher ``version`` (it migrated since) replaces an
older one; messages about older copies are ignored. A deactivation may overtake the arrival of
the copy it refers to (messages from different senders are not ordered), so it is remembered
until that copy arrives. Active, usable individuals are kept sorted by loss so that breeding
reads the best ones without sorting the whole island every time.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from atoll.individual import Individual


class Population:
    """The individuals one worker knows, with the active usable ones ranked best first."""

    def __init__(self) -> None:
        self._by_id: dict[int, Individual] = {}
        self._keys: list[tuple[float, int]] = []
        self._ranked: list[Individual] = []
        self._early_deactivations: set[tuple[int, int]] = set()

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[Individual]:
        return iter(self._by_id.values())

    def __contains__(self, ind_id: int) -> bool:
        return ind_id in self._by_id

    def get(self, ind_id: int) -> Individual | None:
        return self._by_id.get(ind_id)

    @property
    def ranked(self) -> list[Individual]:
        """Active individuals that may be parents, best first. Do not modify."""
        return self._ranked

    def learn(self, ind: Individual) -> bool:
        """Add or update an individual; returns False for a stale copy (older version)."""
        old = self._by_id.get(ind.id)
        if old is not None:
            if old.version > ind.version:
                return False
            self._unrank(old)
        if (ind.id, ind.version) in self._early_deactivations:
            self._early_deactivations.discard((ind.id, ind.version))
            ind.active = False
        self._by_id[ind.id] = ind
        if ind.active and ind.usable:
            key = (ind.loss, ind.id)
            pos = bisect.bisect_left(self._keys, key)
            self._keys.insert(pos, key)
            self._ranked.insert(pos, ind)
        return True

    def deactivate(self, ind_id: int, version: int) -> None:
        """Mark that copy of the individual as gone from this island."""
        ind = self._by_id.get(ind_id)
        if ind is None or ind.version < version:
            self._early_deactivations.add((ind_id, version))
        elif ind.version == version and ind.active:
            self._unrank(ind)
            ind.active = False

    def _unrank(self, ind: Individual) -> None:
        if not (ind.active and ind.usable):
            return
        pos = bisect.bisect_left(self._keys, (ind.loss, ind.id))
        if pos < len(self._keys) and self._ranked[pos] is ind:
            del self._keys[pos]
            del self._ranked[pos]

    def owned_by(self, worker: int, limit: int | None = None) -> list[Individual]:
        """Active usable individuals this worker may emigrate, best first (at most ``limit``)."""
        found: list[Individual] = []
        for ind in self._ranked:
            if ind.owner == worker:
                found.append(ind)
                if limit is not None and len(found) >= limit:
                    break
        return found
