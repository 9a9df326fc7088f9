"""Inherited weights for bred children: which parent's checkpoint a child starts from.

A strategy's child carries ``inherit_from`` (an id, data in the record); the evaluation loads
that individual's checkpoint when the child has none of its own
(:mod:`atoll.evaluation.checkpointing`) and records the epoch it continued from.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from atoll.evolution.strategy import Proposal, Strategy
from atoll.individual import NO_PARENT, Individual


def better_parent(child: Individual, ranked: Sequence[Individual],
                  shape_params: Sequence[str] = ()) -> int:
    """The id of the better of the child's parents among the island's usable ``ranked`` (best
    first) that has the child's values of every ``shape_params``; :data:`NO_PARENT` if none
    has. A crossover child whose better parent has other shapes takes its other parent's
    weights, which fit: trained weights that fit beat training from scratch."""
    parents = {p for p in child.parents if p != NO_PARENT}
    for ind in ranked:  # best first: the first parent met is the better one
        if ind.id in parents and all(ind.params[name] == child.params[name]
                                     for name in shape_params):
            return ind.id
    return NO_PARENT


class Inheriting:
    """Wraps a strategy: each new child it breeds starts from its better parent's checkpoint."""

    def __init__(self, strategy: Strategy, shape_params: Sequence[str] = ()) -> None:
        self.strategy = strategy
        self.shape_params = tuple(shape_params)

    def __repr__(self) -> str:
        return f"Inheriting({self.strategy!r}, shape_params={self.shape_params!r})"

    def ask(self, ranked: Sequence[Individual], rng: random.Random, ident: int) -> Proposal:
        proposal = self.strategy.ask(ranked, rng, ident)
        if isinstance(proposal, Individual):
            proposal.inherit_from = better_parent(proposal, ranked, self.shape_params)
        return proposal

    def tell(self, result: Individual) -> None:
        self.strategy.tell(result)
