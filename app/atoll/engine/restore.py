"""Rebuilding island populations from a run's record, for a resume under any rank layout.

The record is an append-only log: the evaluations (each on the island that bred it) and the
migrations (moves or copies, in version order). Replaying the migrations says on which old
islands each individual was last active; old island ``i`` becomes new island
``i % new_islands``, and on the new island the individual is owned by a worker chosen from
its id. Every leader runs the same replay, so all workers of an island agree without talking.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import h5py
import numpy as np

from atoll.engine.population import Population
from atoll.engine.topology import Layout
from atoll.individual import FINISHED, NO_EPOCH, NO_PARENT, Individual, Origin, Status
from atoll.space import Space


def completed_count(individuals: np.ndarray) -> int:
    return int(np.isin(individuals["status"], FINISHED).sum())


def moved_islands(migrations: np.ndarray) -> dict[int, set[int]]:
    """Old islands each individual that ever migrated was last active on (replayed in order).

    Individuals that never moved are active only on the island that evaluated them.
    """
    homes: dict[int, set[int]] = {}
    if not len(migrations):
        return homes
    moved = _enum_value(migrations.dtype["mode"], "migration")
    order = np.argsort(migrations["version"], kind="stable")
    rows = zip(migrations["individual"][order].tolist(), migrations["mode"][order].tolist(),
               migrations["from_island"][order].tolist(),
               migrations["to_island"][order].tolist(), strict=True)
    for ind_id, mode, source, target in rows:
        where = homes.setdefault(ind_id, {source})
        if mode == moved:
            where.discard(source)
        where.add(target)
    return homes


def restore_population(individuals: np.ndarray, migrations: np.ndarray, space: Space,
                       layout: Layout, island: int) -> Population:
    """The population one island of the new layout starts from (vectorised: 100,000 rows in
    well under a second)."""
    ok = individuals[individuals["status"] == int(Status.OK)]
    homes = moved_islands(migrations)
    moved_ids = np.fromiter(homes, dtype=np.int64, count=len(homes))
    mask = (ok["island"] % layout.islands == island) & ~np.isin(ok["id"], moved_ids)
    here = {i for i, where in homes.items() if island in {old % layout.islands for old in where}}
    mask |= np.isin(ok["id"], np.fromiter(here, dtype=np.int64, count=len(here)))
    rows = ok[mask]
    rows = rows[np.lexsort((rows["id"], rows["loss"]))]  # best first: cheap ranked inserts
    workers = layout.workers_on_island(island)
    columns = {name: rows[name].tolist() for name in (
        "id", "worker", "generation", "parent_a", "parent_b", "inherit_from", "inherit_epoch",
        "origin", "loss", "born", "started", "finished")}
    values = [rows[name].tolist() for name in space.names]
    population = Population()
    for n, ind_id in enumerate(columns["id"]):
        population.learn(Individual(
            id=ind_id, params={name: column[n] for name, column in zip(
                space.names, values, strict=True)},
            island=island, worker=columns["worker"][n], generation=columns["generation"][n],
            owner=workers[ind_id % len(workers)], version=0,
            parents=(columns["parent_a"][n], columns["parent_b"][n]),
            inherit_from=columns["inherit_from"][n], inherit_epoch=columns["inherit_epoch"][n],
            origin=_origin(columns["origin"][n], columns["parent_a"][n]),
            loss=columns["loss"][n], status=Status.OK,
            born=columns["born"][n], started=columns["started"][n],
            finished=columns["finished"][n]))
    return population


def to_continue(individuals: np.ndarray, space: Space, workers: int, worker: int,
                unrecorded: Mapping[int, Mapping[str, Any]] | None = None) -> list[Individual]:
    """This worker's share of the evaluations that were interrupted and never completed since:
    round robin in order of id over the job's workers (so no worker gets more of them than its
    share of the budget), each to be continued under its id. An interrupted one is taken as its
    last part was recorded; ``unrecorded`` adds those a killed job left only a checkpoint of
    (id: the individual as the checkpoint keeps it)."""
    status = individuals["status"]
    completed = individuals["id"][np.isin(status, FINISHED)]
    rows = individuals[(status == int(Status.INTERRUPTED)) & ~np.isin(individuals["id"],
                                                                      completed)]
    values = [rows[name].tolist() for name in space.names]  # Python values, strings decoded
    waiting = {}
    for n, ident in enumerate(rows["id"].tolist()):  # later parts win
        waiting[int(ident)] = Individual(
            id=int(ident), params={name: column[n] for name, column in zip(
                space.names, values, strict=True)},
            parents=(int(rows["parent_a"][n]), int(rows["parent_b"][n])),
            inherit_from=int(rows["inherit_from"][n]), inherit_epoch=int(rows["inherit_epoch"][n]),
            origin=_origin(int(rows["origin"][n]), int(rows["parent_a"][n])),
            born=float(rows["born"][n]), status=Status.INTERRUPTED)
    for ident, about in (unrecorded or {}).items():
        params = {name: about["params"].get(name) for name in space.names}
        if space.contains(params):
            parents = about.get("parents", [NO_PARENT, NO_PARENT])
            waiting[ident] = Individual(
                id=ident, params=params, parents=(int(parents[0]), int(parents[1])),
                inherit_from=int(about.get("inherit_from", NO_PARENT)),
                inherit_epoch=int(about.get("inherit_epoch", NO_EPOCH)),
                origin=Origin(int(about.get("origin", Origin.RANDOM))),
                born=float(about.get("born", 0.0)), status=Status.INTERRUPTED)
    return [waiting[ident] for ident in sorted(waiting)[worker::workers]]


def _origin(value: int, parent_a: int) -> Origin:
    """Records before the origin named the strategy said "bred" (1) for CMA-ES's candidates
    too; the GA's always have a parent, CMA-ES's none."""
    origin = Origin(value)
    return Origin.CMAES if origin == Origin.GA and parent_a == NO_PARENT else origin


def _enum_value(dtype: np.dtype, name: str) -> int:
    enum = h5py.check_enum_dtype(dtype)
    return int(enum[name]) if enum else 0
