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
starts at ``sigma_factor`` again and finds its scale within a few dozen evaluations.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from atoll.evolution.base import ANY, Propagator
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
    """Wraps the GA's breeding step: judges the previous child, then breeds the next one.

    The loop evaluates a child in place before it breeds again, so the child returned by the
    last call carries its loss when the next call comes.
    """

    parents = ANY
    offspring = 1

    def __init__(self, breed: Propagator, scale: StepScale, sigma_factor: float,
                 pool_size: int, dimensions: int) -> None:
        self.breed = breed
        self.scale = scale
        self.pool_size = pool_size
        self.damping = 1.0 + dimensions / 2.0
        self.bounds = (MIN_STEP / sigma_factor, MAX_STEP / sigma_factor)
        self._last: tuple[Individual, float] | None = None

    def __repr__(self) -> str:
        return f"SuccessRule({self.breed!r}, scale={self.scale.value:.3g})"

    def __call__(self, individuals: Sequence[Individual],
                 rng: random.Random) -> list[Individual]:
        self._judge()
        child = self.breed(individuals, rng)[0]
        if child.origin == Origin.BRED and len(individuals) >= self.pool_size:
            losses = {i.id: i.loss for i in individuals[: self.pool_size]}
            parents = [losses[p] for p in child.parents if p in losses]
            if parents:
                self._last = (child, min(parents))
        return [child]

    def _judge(self) -> None:
        if self._last is None:
            return
        child, threshold = self._last
        self._last = None
        if not child.usable:
            return
        success = 1.0 if child.loss <= threshold else 0.0  # a tie on a plateau: keep moving
        factor = math.exp((success - TARGET_RATE) / ((1.0 - TARGET_RATE) * self.damping))
        low, high = self.bounds
        self.scale.value = min(max(self.scale.value * factor, low), high)
