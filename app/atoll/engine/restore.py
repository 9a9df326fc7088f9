"""Rebuilding island populations from a run's record, for a resume under any rank layout.

The record is an append-only log: the evaluations (each on the island that bred it) and the
migrations (moves or copies, in version order). Replaying the migrations says on which old
islands each individual was last active, and as which copy; old island ``i`` becomes new island
``i % new_islands``, and on the new island the individual is owned by a worker chosen from
its id. A copy keeps its version (how many migrations brought it there), so the next job's
migrations number on and a later replay orders them after this job's, and a copy is known as
one (:func:`atoll.individual.is_copy`). Every leader runs the same replay, so all workers of an
island agree without talking.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import h5py
import numpy as np

from atoll.engine.population import Population
from atoll.engine.topology import Layout
from atoll.individual import (
    FIELD_NAMES,
    FINISHED,
    NO_PARENT,
    Individual,
    Origin,
    Status,
    from_about,
    from_fields,
    is_copy,
    replaced_member,
)
from atoll.space import Space


def completed_count(individuals: np.ndarray) -> int:
    return int(np.isin(individuals["status"], FINISHED).sum())


def moved_islands(migrations: np.ndarray) -> dict[int, dict[int, int]]:
    """For each individual that ever migrated: the old islands it was last active on (replayed
    in order), each with the version of its copy there (0: the island that evaluated it).

    Individuals that never moved are active only on the island that evaluated them.
    """
    homes: dict[int, dict[int, int]] = {}
    if not len(migrations):
        return homes
    moved = _enum_value(migrations.dtype["mode"], "migration")
    order = np.argsort(migrations["version"], kind="stable")
    rows = zip(migrations["individual"][order].tolist(), migrations["mode"][order].tolist(),
               migrations["version"][order].tolist(),
               migrations["from_island"][order].tolist(),
               migrations["to_island"][order].tolist(), strict=True)
    for ind_id, mode, version, source, target in rows:
        where = homes.setdefault(ind_id, {source: 0})
        if mode == moved:
            where.pop(source, None)
        where[target] = max(version, where.get(target, 0))
    return homes


def restore_population(individuals: np.ndarray, migrations: np.ndarray, space: Space,
                       layout: Layout, island: int, lineages: bool = False) -> Population:
    """The population one island of the new layout starts from (vectorised: 100,000 rows in
    well under a second).

    ``lineages`` (a PBT island, which copies its emigrants): every individual evaluated on an
    old island that maps here is this island's own (version 0), though copies of it came back
    (a copy of a copy) or came from another old island mapped here. As a copy it would be no
    PBT member, and the member it had replaced would come back to life. Only copies: one that
    an island of another strategy moved keeps its place and version (a later job's versions
    of it must count on, or the replay of its moves would end elsewhere)."""
    ok = individuals[individuals["status"] == int(Status.OK)]
    homes = moved_islands(migrations)
    moved_ids = np.fromiter(homes, dtype=np.int64, count=len(homes))
    own = ok["island"] % layout.islands == island
    mask = own & ~np.isin(ok["id"], moved_ids)
    versions = {}  # the moved ones active here: the version of their copy here
    for ident, where in homes.items():
        here = [version for old, version in where.items() if old % layout.islands == island]
        if here:
            versions[ident] = max(here)
    mask |= np.isin(ok["id"], np.fromiter(versions, dtype=np.int64, count=len(versions)))
    if lineages:
        moved = migrations["individual"][migrations["mode"] == _enum_value(
            migrations.dtype["mode"], "migration")] if len(migrations) else []
        copied_only = own & ~np.isin(ok["id"], moved)
        mask |= copied_only
        versions.update(dict.fromkeys(ok["id"][copied_only].tolist(), 0))
    rows = ok[mask]
    rows = rows[np.lexsort((rows["id"], rows["loss"]))]  # best first: cheap ranked inserts
    workers = layout.workers_on_island(island)
    restored = recorded(rows, space)
    for ind in restored:
        ind.island, ind.owner = island, workers[ind.id % len(workers)]
        ind.version = versions.get(ind.id, 0)
    if lineages:  # the members in turn, so that no worker is left without one to train on
        for n, member in enumerate(sorted(pbt_members(restored), key=lambda i: i.id)):
            member.owner = workers[n % len(workers)]
    population = Population()
    for ind in restored:
        population.learn(ind)
    return population


def pbt_members(individuals: list[Individual]) -> list[Individual]:
    """The island's own individuals that no later one of its own replaced: PBT's members."""
    own = [ind for ind in individuals if not is_copy(ind)]
    replaced = {replaced_member(ind) for ind in own}
    return [ind for ind in own if ind.id not in replaced]


def to_continue(individuals: np.ndarray, space: Space,
                unrecorded: Mapping[int, Mapping[str, Any]] | None = None) -> list[Individual]:
    """The evaluations that were interrupted and never completed since, in order of id, each
    to be continued under its id (:func:`deal` gives each a worker). An
    interrupted one is taken as its last part was recorded; ``unrecorded`` adds those a killed
    job left only a checkpoint of (id: the individual as the checkpoint keeps it)."""
    status = individuals["status"]
    completed = individuals["id"][np.isin(status, FINISHED)]
    rows = individuals[(status == int(Status.INTERRUPTED)) & ~np.isin(individuals["id"],
                                                                      completed)]
    waiting = {ind.id: ind for ind in recorded(rows, space)}  # later parts win
    for ident, kept in (unrecorded or {}).items():
        params = {name: kept["params"].get(name) for name in space.names}
        if space.contains(params):
            waiting[ident] = from_about(ident, kept, params)
    return [waiting[ident] for ident in sorted(waiting)]


def deal(interrupted: Sequence[Individual], layout: Layout) -> list[int]:
    """The worker that continues each of ``interrupted``: the one that ran it, where this
    layout has that worker on the same island (a requeue on the same allocation: each goes
    on where it ran, a PBT lineage at home), at most one each; the others to a worker with
    the fewest so far, of their island first, so no worker gets more than its share of the
    budget."""
    load = [0] * layout.workers
    chosen = [-1] * len(interrupted)
    for n, ind in enumerate(interrupted):
        ran = ind.worker
        if 0 <= ran < layout.workers and load[ran] == 0 and \
                layout.island_of_worker(ran) == ind.island % layout.islands:
            chosen[n], load[ran] = ran, 1
    for n, ind in enumerate(interrupted):
        if chosen[n] < 0:
            home = ind.island % layout.islands
            worker = min(range(layout.workers),
                         key=lambda w: (load[w], layout.island_of_worker(w) != home, w))
            chosen[n] = worker
            load[worker] += 1
    return chosen


def recorded(rows: np.ndarray, space: Space) -> list[Individual]:
    """The individuals of record ``rows``, as they were recorded (column by column: a loop over
    rows of a structured array costs many times more)."""
    fields = [rows[name].tolist() for name in FIELD_NAMES]
    values = [rows[name].tolist() for name in space.names]  # Python values, strings decoded
    found = []
    for n, row in enumerate(zip(*fields, strict=True)):
        ind = from_fields(row, {name: column[n] for name, column in zip(
            space.names, values, strict=True)})
        ind.origin = _origin(ind.origin, ind.parents[0])
        found.append(ind)
    return found


def _origin(value: int, parent_a: int) -> Origin:
    """Records before the origin named the strategy said "bred" (1) for CMA-ES's candidates
    too; the GA's always have a parent, CMA-ES's none."""
    origin = Origin(value)
    return Origin.CMAES if origin == Origin.GA and parent_a == NO_PARENT else origin


def _enum_value(dtype: np.dtype, name: str) -> int:
    enum = h5py.check_enum_dtype(dtype)
    return int(enum[name]) if enum else 0
