"""The asynchronous island loop run by every worker leader.

Breed from what this worker knows, evaluate, tell the island, take in what arrived, sometimes
send emigrants to another island, and repeat until this worker's share of the budget is spent
and its island partners have none to spare, the wall time is up, or a stop is requested. There
is no generation barrier: a leader waits for others only once its share is spent, for its
partners' answers and then in the final drain.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from atoll.config import MigrationConfig
from atoll.engine.population import Population
from atoll.engine.protocol import COUNTED, Handler, Tag
from atoll.engine.sharing import Sharing
from atoll.engine.topology import Layout
from atoll.evolution.strategy import Continue, ContinueFirst, Strategy
from atoll.individual import FINISHED, Individual, Status

log = logging.getLogger(__name__)


class Mailbox(Protocol):
    """How a leader talks to the other leaders: :class:`atoll.engine.protocol.MpiMailbox`
    in a job; an in-memory one in tests and benchmarks drives several loops in one process."""

    def send_individual(self, tag: Tag, ind: Individual, to: Iterable[int]) -> None: ...
    def send_deactivate(self, ind_id: int, version: int, to: Iterable[int]) -> None: ...
    def send_count(self, tag: Tag, count: int, to: Iterable[int]) -> None: ...
    def send_curve(self, ind_id: int, curve: Sequence[tuple[int, float]],
                   to: Iterable[int]) -> None: ...
    def poll(self, handle: Handler) -> int: ...
    def drain(self, handle: Handler) -> None: ...


class Curves(Protocol):
    """What an island's schedulers share, through the mailbox (no worker reads another's
    files): a curve sent with its result, and values sent while the evaluation runs."""

    def shared(self, ind: Individual) -> Sequence[tuple[int, float]]:
        """The curve of this worker's evaluation ``ind`` to send with it (empty: none)."""
        ...

    def hear(self, ind_id: int, curve: Sequence[tuple[int, float]]) -> None:
        """Part of a curve another worker of the island sent."""
        ...

    def attach(self, partners: Partners) -> None:
        """The loop's way to reach the island's other workers during an evaluation."""
        ...


class Partners(Protocol):
    """What a scheduler may do mid-evaluation: send values now, take in what arrived."""

    def send_now(self, ind_id: int, curve: Sequence[tuple[int, float]]) -> None: ...
    def take_in(self) -> int: ...


class Holds(Protocol):
    """Who keeps the checkpoints children may inherit, on any island
    (:class:`atoll.record.checkpoints.Retention`): told of each copy of an individual before
    it leaves for another island, and of each copy that arrives from one; closed when no
    leader breeds any more."""

    def leaving(self, migrant: Individual) -> None: ...
    def arrived(self, migrant: Individual) -> None: ...
    def close(self) -> None: ...


class Recorder(Protocol):
    """Where a leader's own evaluations and emigrations go (the HDF5 worker log)."""

    def add_individual(self, ind: Individual) -> None: ...
    def add_migration(self, individual_id: int, version: int, mode: str, from_island: int,
                      to_island: int, from_worker: int, to_worker: int, time: float) -> None: ...
    def maybe_flush(self, now: float | None = None) -> bool: ...
    def flush(self) -> None: ...


@dataclass
class Budget:
    """This worker's share of evaluations (it grows and shrinks as island partners share
    theirs: :mod:`atoll.engine.sharing`), and whether the job was asked to stop (a signal or
    the wall time: both arrive through ``stop_requested``)."""

    evaluations: int
    stop_requested: Callable[[], bool] = lambda: False


@dataclass
class IslandStats:
    """What the leader measured, for the summary and the benchmarks."""

    evaluations: int = 0
    completed: int = 0  # evaluations that spend budget (not interrupted)
    objective_seconds: float = 0.0
    first_evaluation: float = 0.0


def breeding_rng(seed: int, job: int, worker: int) -> random.Random:
    """The random stream a worker leader breeds and migrates with, one per (seed, job, worker).

    Python's generator, not numpy's: breeding draws a handful of scalars per evaluation, and
    a scalar draw through Python's costs about a tenth of one through numpy's Generator
    (benchmarks/RESULTS.md). A string seed is hashed (SHA-512), so nearby keys give unrelated
    streams.
    """
    return random.Random(f"atoll:{seed}:{job}:{worker}")


def geometric(rng: random.Random, p: float) -> int:
    """Trials up to and including the first success, each succeeding with ``p`` in (0, 1]."""
    if p >= 1.0:
        return 1
    # Inversion: 1 - random() lies in (0, 1], so the log is finite.
    return 1 + math.floor(math.log(1.0 - rng.random()) / math.log1p(-p))


Evaluate = Callable[[Individual], None]
"""Evaluates an individual in place (sets loss, status, error, started, finished)."""


class IslandLoop:
    """One worker leader's asynchronous search. Collective only in :meth:`run`'s final drain."""

    def __init__(self, *, layout: Layout, worker: int, mailbox: Mailbox,
                 strategy: Strategy, evaluate: Evaluate, recorder: Recorder,
                 migration: MigrationConfig, rng: random.Random, id_base: int = 0,
                 population: Population | None = None,
                 listeners: Sequence[Callable[[Individual], None]] = (),
                 curves: Curves | None = None, holds: Holds | None = None,
                 hear_started: Callable[[Individual], None] | None = None) -> None:
        self.layout = layout
        self.worker = worker
        self.island = layout.island_of_worker(worker)
        self.peers = tuple(w for w in layout.workers_on_island(self.island) if w != worker)
        self.mailbox = mailbox
        self.strategy = strategy
        self.listeners = tuple(listeners)
        """Hear each result of this job the island learns, once, after the strategy."""
        self.curves = curves
        self.holds = holds
        self.hear_started = hear_started
        """Hears each candidate a partner begins to evaluate; when set, this loop tells its
        partners of its own as it begins them (``Tag.STARTED``)."""
        self.evaluate = evaluate
        self.recorder = recorder
        self.migration = migration
        self.rng = rng
        self.id_base = id_base
        self.population = population if population is not None else Population()
        for ind in sorted(self.population, key=lambda i: i.id):  # restored: told in one order
            self.strategy.tell(ind)
        self.stats = IslandStats()
        self._new = 0  # new individuals bred so far (continued ones keep their ids)
        self._until_emigration = self._emigration_gap()
        self.sharing = Sharing(self.peers, mailbox.send_count, self.take_in,
                               kept=self._waiting)
        if curves is not None:
            curves.attach(self)

    def send_now(self, ind_id: int, curve: Sequence[tuple[int, float]]) -> None:
        """Part of the running evaluation ``ind_id``'s curve to the island's other workers."""
        if self.peers:
            self.mailbox.send_curve(ind_id, curve, self.peers)

    def take_in(self) -> int:
        """Handle what arrived, as between evaluations (during one: at each report, to answer
        the partners); how many messages."""
        return self.mailbox.poll(self._receive)

    def _waiting(self) -> int:
        """Interrupted evaluations a resume handed this worker, not yet continued."""
        return len(self.strategy.waiting) if isinstance(self.strategy, ContinueFirst) else 0

    def _emigration_gap(self) -> float:
        """Evaluations until this worker next sends emigrants: each evaluation is a Bernoulli
        trial with the migration probability, so the gap is geometric (one draw per emigration
        instead of one per evaluation)."""
        if self.layout.islands < 2 or self.migration.probability <= 0:
            return math.inf
        return geometric(self.rng, self.migration.probability)

    def run(self, budget: Budget) -> IslandStats:
        """Search until the budget is spent, then drain messages with the other leaders.

        A paused evaluation spends none of it: it spends one when its last part ends."""
        steps = 0
        self.sharing.begin(budget)
        while self.sharing.go_on():  # it took in what arrived: the step polls no more
            self.sharing.begin_step()  # from here on, one of the share is this step's
            self.sharing.done += self._cycle(steps).status != Status.PAUSED
            self.sharing.evaluating = False
            steps += 1
        self.sharing.end()
        self.stats.evaluations = steps
        # Write this worker's rows now, while other workers may still be evaluating: at the
        # very end every leader would flush at once, and on a crowded node they queue for it.
        self.recorder.flush()
        self.mailbox.drain(self._receive)
        if self.holds is not None:  # every leader is done: nobody chooses a parent any more
            self.holds.close()
        return self.stats

    def step(self, generation: int) -> Individual:
        """One evaluation's cycle: take in what arrived, breed, evaluate, tell the island,
        maybe send emigrants; the individual evaluated. Public so that a harness can drive
        several loops in one process in a schedule of its choosing
        (benchmarks/sequential_side.py)."""
        self.take_in()
        return self._cycle(generation)

    def _cycle(self, generation: int) -> Individual:
        """A step after its poll: one poll per evaluation, as a poll costs more than breeding
        on a node with more ranks than cores."""
        ind = self._breed(generation)
        if self.hear_started is not None and self.peers:
            self.mailbox.send_individual(Tag.STARTED, ind, self.peers)
        self.evaluate(ind)
        if generation == 0:
            self.stats.first_evaluation = ind.started
        self.stats.objective_seconds += ind.finished - ind.started
        self.stats.completed += ind.status in FINISHED
        self._learn(ind)
        self.recorder.add_individual(ind)
        self.mailbox.send_individual(Tag.RESULT, ind, self.peers)
        if self.curves is not None:
            curve = self.curves.shared(ind)
            if curve:
                self.send_now(ind.id, curve)
        self._until_emigration -= 1
        if self._until_emigration <= 0:
            self._emigrate()
            self._until_emigration = self._emigration_gap()
        self.recorder.maybe_flush()
        return ind

    def _breed(self, generation: int) -> Individual:
        """The next individual: a new one takes the next of this worker's ids (every
        ``workers``-th from ``id_base``); a continued one keeps its own."""
        ident = self.id_base + self._new * self.layout.workers + self.worker
        proposal = self.strategy.ask(self.population.ranked, self.rng, ident)
        if isinstance(proposal, Continue):
            child = replace(proposal.individual, params=dict(proposal.individual.params),
                            loss=math.nan, status=Status.OK, error="")
        else:
            child = proposal
            child.born = time.time()
            self._new += 1
        child.island, child.worker, child.owner = self.island, self.worker, self.worker
        child.generation, child.version, child.active = generation, 0, True
        return child

    def _learn(self, ind: Individual) -> None:
        """The population learns ``ind``; the strategy is told of each result once (an
        interrupted or paused one again when it is continued). A part of an evaluation that
        arrives after its end (from another worker: messages from different senders are not
        ordered) is ignored."""
        known = self.population.get(ind.id)
        if known is not None and known.status in FINISHED and ind.status not in FINISHED:
            return
        if self.population.learn(ind) and (known is None or known.status not in FINISHED):
            self.strategy.tell(ind)
            for listen in self.listeners:
                listen(ind)

    def _receive(self, tag: Tag, source: int, payload: Any) -> None:
        if tag == Tag.DEACTIVATE:
            self.population.deactivate(*payload)
        elif tag == Tag.CURVE:
            if self.curves is not None:
                self.curves.hear(*payload)
        elif tag == Tag.STARTED:
            if self.hear_started is not None:
                self.hear_started(payload)
        elif tag in COUNTED:
            self.sharing.hear(tag, source, payload)
        else:
            self._learn(payload)
            if tag == Tag.MIGRANT and self.holds is not None:
                self.holds.arrived(payload)

    def _emigrate(self) -> None:
        candidates = self.population.owned_by(self.worker, self.migration.migrants)
        if not candidates:
            return
        others = [i for i in range(self.layout.islands) if i != self.island]
        target = others[self.rng.randrange(len(others))]
        target_workers = self.layout.workers_on_island(target)
        now = time.time()
        for ind in candidates:
            owner = target_workers[self.rng.randrange(len(target_workers))]
            migrant = replace(ind, island=target, owner=owner, version=ind.version + 1,
                              active=True)
            if self.holds is not None:  # before it leaves: a hold must never arrive late
                self.holds.leaving(migrant)
            self.mailbox.send_individual(Tag.MIGRANT, migrant, target_workers)
            if self.migration.moves:
                self.population.deactivate(ind.id, ind.version)
                self.mailbox.send_deactivate(ind.id, ind.version, self.peers)
            self.recorder.add_migration(ind.id, migrant.version, self.migration.mode,
                                        self.island, target, self.worker, owner, now)
