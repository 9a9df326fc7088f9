"""Rebuilding island populations from a run's record, for a resume under any rank layout.

The record is an append-only log: the evaluations (each on the island that bred it) and the
migrations (moves or copies, in version order). Replaying the migrations says on which old
islands each individual was last active; old island ``i`` becomes new island
``i % new_islands``, and on the new island the individual is owned by a worker chosen from
its id. Every leader runs the same replay, so all workers of an island agree without talking.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import h5py
import numpy as np

from atoll.individual import Individual, Origin, Status
from atoll.population import Population
from atoll.space import Space
from atoll.topology import Layout

COMPLETED = (Status.OK, Status.FAILED, Status.PRUNED)
"""Statuses that spend budget; an interrupted evaluation is redone on resume."""


def completed_count(individuals: np.ndarray) -> int:
    return int(np.isin(individuals["status"], [int(s) for s in COMPLETED]).sum())


def last_islands(individuals: np.ndarray, migrations: np.ndarray) -> dict[int, set[int]]:
    """Old islands each usable individual was last active on."""
    ok = individuals[individuals["status"] == int(Status.OK)]
    homes = {int(i): {int(isl)} for i, isl in zip(ok["id"], ok["island"], strict=True)}
    if len(migrations):
        moved = _enum_value(migrations.dtype["mode"], "migration")
        for row in migrations[np.argsort(migrations["version"], kind="stable")]:
            where = homes.get(int(row["individual"]))
            if where is None:
                continue
            if int(row["mode"]) == moved:
                where.discard(int(row["from_island"]))
            where.add(int(row["to_island"]))
    return homes


def restore_population(individuals: np.ndarray, migrations: np.ndarray, space: Space,
                       layout: Layout, island: int) -> Population:
    """The population one island of the new layout starts from."""
    population = Population()
    workers = layout.workers_on_island(island)
    homes = last_islands(individuals, migrations)
    for row in individuals:
        where = homes.get(int(row["id"]))
        if where is None or island not in {old % layout.islands for old in where}:
            continue
        owner = workers[int(row["id"]) % len(workers)]
        population.learn(_individual(row, space, island, owner))
    return population


def _individual(row: Any, space: Space, island: int, owner: int) -> Individual:
    return Individual(
        id=int(row["id"]), params=dict(_params(row, space)), island=island,
        worker=int(row["worker"]), generation=int(row["generation"]), owner=owner, version=0,
        parents=(int(row["parent_a"]), int(row["parent_b"])), origin=Origin(int(row["origin"])),
        loss=float(row["loss"]), status=Status(int(row["status"])), born=float(row["born"]),
        started=float(row["started"]), finished=float(row["finished"]))


def _params(row: Any, space: Space) -> Iterator[tuple[str, Any]]:
    for p in space.params:
        value = row[p.name]
        yield p.name, value.item() if hasattr(value, "item") else value


def _enum_value(dtype: np.dtype, name: str) -> int:
    enum = h5py.check_enum_dtype(dtype)
    return int(enum[name]) if enum else 0
