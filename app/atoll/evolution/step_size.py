"""The GA's Gaussian step size, adapted by the 1/5th success rule (``evolution.sigma_rule``).

A fixed ``sigma_factor`` is either too large to refine a good point or too small to cross the
space. The success rule (Rechenberg's, in the smooth form of Kern et al. 2004, "Learning
probability distributions in continuous evolutionary algorithms") grows the step when more than a
fifth of a worker's bred children succeed and shrinks it when fewer do, so the step follows the
distance to the next improvement.

A child succeeds when its loss is at most its better parent's: the (1+1) form's "the offspring
replaces its parent", with ties counted so that the step grows on a plateau instead of freezing
there. Judging against the pool's worst instead lets crossover alone succeed so often that on an
island of several workers the step grows without bound. Only children whose parents are among
the island's ``population_size`` best are judged (with "best" selection, all of them); children
of the random init and failed evaluations are not.

The scale is a worker's own (its leader breeds), starts at 1 and is not recorded: a resumed job
starts at ``sigma_factor`` again and finds it again from its new results.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from atoll.individual import Individual, Origin

TARGET_RATE = 0.2
"""The success rate the rule steers to."""

MAX_STEP = 0.5
"""The largest step in unit space (half of every range): beyond it a step is a random restart."""

MIN_STEP = 1e-12
"""The smallest: below it a float step no longer changes a value's unit view."""


@dataclass
class StepScale:
    """The factor a worker's Gaussian interval mutation multiplies ``sigma_factor`` by."""

    value: float = 1.0


class SuccessRule:
    """Judges each child the GA bred for this worker when its result is told, and scales the
    step accordingly."""

    def __init__(self, scale: StepScale, sigma_factor: float, pool_size: int,
                 dimensions: int) -> None:
        self.scale = scale
        self.pool_size = pool_size
        self.damping = 1.0 + dimensions / 2.0
        self.bounds = (MIN_STEP / sigma_factor, MAX_STEP / sigma_factor)
        self._expected: tuple[int, float] | None = None  # the child's id, its better parent's loss

    def __repr__(self) -> str:
        return f"SuccessRule(scale={self.scale.value:.3g})"

    def expect(self, child: Individual, ranked: Sequence[Individual]) -> None:
        """Note the child just bred (``ranked`` is what it was bred from), to be judged when
        its result is told; only children of parents among the pool's best are judged."""
        self._expected = None
        if child.origin == Origin.GA and len(ranked) >= self.pool_size:
            losses = {i.id: i.loss for i in ranked[: self.pool_size]}
            parents = [losses[p] for p in child.parents if p in losses]
            if parents:
                self._expected = (child.id, min(parents))

    def tell(self, result: Individual) -> None:
        if self._expected is None or result.id != self._expected[0]:
            return
        threshold = self._expected[1]
        self._expected = None
        if not result.usable:
            return
        success = 1.0 if result.loss <= threshold else 0.0  # a tie on a plateau: keep moving
        factor = math.exp((success - TARGET_RATE) / ((1.0 - TARGET_RATE) * self.damping))
        low, high = self.bounds
        self.scale.value = min(max(self.scale.value * factor, low), high)
