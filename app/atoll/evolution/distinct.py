"""An island breeds again rather than evaluate a candidate it already evaluated (``Distinct``).

A GA child is often a copy: of a parent, when it is not crossed over, or crossed with a parent
that differs in one parameter, and then neither point-mutated nor moved by the interval step
(which moves one parameter, and leaves an int on its value when the step is small, or a value
at its bound); CMA-ES with margin samples a lattice point again; a random candidate in a small
space repeats one. On spaces of ints and choices (layers, widths, activations: most networks')
that is a large share of the candidates, each a whole training whose result the record
already holds. So the island asks its strategy again, up to ``RETRIES`` times, and evaluates a
repeat only when every try was one (a small space, or a population converged on few values:
one warning per worker).

Known means told: every result of the island this worker learned (restored ones at the start,
migrants, paused and failed ones too), and every candidate a partner began to evaluate
(``started``: the island loop passes on what partners announce), so two workers do not train
the same candidate at once but when both breed it within one message's flight. An island whose
children inherit weights (``inherit.enabled``, PBT) keeps its repeats: a child with its
parent's parameters trains on from the parent's weights, which repeats nothing.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from typing import Any

from atoll.evolution.strategy import Proposal, Strategy
from atoll.individual import Individual

log = logging.getLogger(__name__)

RETRIES = 20
"""Candidates asked for in a row before a repeat is evaluated."""


def parameters_key(params: Mapping[str, Any]) -> frozenset[tuple[str, Any]]:
    """The candidate's values by name, in any order (``1`` and ``1.0`` are one value)."""
    return frozenset(params.items())


class Distinct:
    """Wraps a strategy: a new candidate that repeats a known one is bred again."""

    def __init__(self, strategy: Strategy, worker: int = 0) -> None:
        self.strategy = strategy
        self.worker = worker
        self.repeats = 0
        """Candidates bred again because they repeated a known one."""
        self._known: set[frozenset[tuple[str, Any]]] = set()
        self._warned = False

    def __repr__(self) -> str:
        return f"Distinct({self.strategy!r})"

    def started(self, candidate: Individual) -> None:
        """A partner began to evaluate ``candidate``: it is known from now on."""
        self._known.add(parameters_key(candidate.params))

    def tell(self, result: Individual) -> None:
        self._known.add(parameters_key(result.params))
        self.strategy.tell(result)

    def ask(self, ranked: Sequence[Individual], rng: random.Random, ident: int) -> Proposal:
        for _ in range(RETRIES):
            proposal = self.strategy.ask(ranked, rng, ident)
            if not isinstance(proposal, Individual) or \
                    parameters_key(proposal.params) not in self._known:
                return proposal
            self.repeats += 1
        if not self._warned:
            self._warned = True
            log.warning("worker %d: %d candidates in a row repeated evaluated ones, so it "
                        "evaluates a repeat: its strategy finds few new points (a small space, "
                        "or a population converged on few values; said once)", self.worker,
                        RETRIES)
        return proposal
