"""CMA-ES and the GA on one island, sharing its population (``evolution.strategy = "hybrid"``).

CMA-ES refines fast where the landscape is smooth and stalls in a local basin where it is
rugged; the GA's crossover and success-ruled steps cross basins (and exploit separable
structure) but refine slowly. Islands of each kind (``island_strategies``) split the budget, so
each gets half; here every candidate comes from one or the other, and both learn from every
result: CMA-ES takes the GA's children into its update like any other result, and the GA
breeds from a population that holds CMA-ES's.

Which one breeds is adaptive operator selection by adaptive pursuit (Thierens 2005, "An adaptive
pursuit strategy for allocating operator probabilities"): each result of the island is credited to
the strategy that bred it (its ``origin``). A result that improves on the island's best loss earns
credit for how far it moved the best, in units of the island's spread at this worker's last ask
(the gap from its best loss to its ``generation``-th best, CMA-ES's population size), at most 1; any
other result earns 0. The spread shrinks as the island converges, so a steady refinement keeps
earning, whatever the loss's scale or sign; a GA child that nudges the best by a hair, as its
small steps around the best often do late on a smooth function, earns next to nothing (counted as
a whole success, such nudges handed the GA the lead on ackley and sphere in some seeds and it
stalled there), while one that jumps into a better basin earns in full. Each strategy's credit
per candidate is remembered over about WINDOW results; with every result,
the probability of picking CMA-ES moves by PURSUIT towards 1 - FLOOR while CMA-ES has the higher
rate and towards FLOOR while the GA has. (Probability matching, picking in proportion to the
rates, kept the GA's small improvements on a smooth function at a large share of the
candidates.)

Each rate is shrunk towards the island's pooled rate by SHRINK pseudo-tries (empirical Bayes: a
Beta prior centred on what the island achieves), so a faded record reads as the island's rate, a
hair above the leader's (the pooled rate holds PRIOR's 1/2): the strategy at the floor takes the
lead again, for a burst of candidates, only when its last failure has all but faded.

Pursuit locks on: once one strategy leads, the other breeds too rarely to show that it would do
better, and on a rugged function CMA-ES converging into a local basin can keep the lead while the
island finds nothing new. So the floor grows with stagnation, measured in the island's own usual
gap between new bests: after PATIENCE such gaps without one it grows, and after twice as many
each strategy breeds at least STALLED_FLOOR of the candidates, whatever the pursuit says; the
next new best brings the floor back to FLOOR. While the island improves at its usual pace
(CMA-ES on a smooth function, however slowly it finds new bests) the floor stays at FLOOR and
costs the leader nothing; a fixed count of results would read a slow, steady refinement as a
stall. The measurements behind
these choices are in benchmarks/EARLIER-RUNS.md and the README's "Which strategy".

The state is not recorded: on resume it is rebuilt from the restored results the loop tells it,
in order of id (before the first ask there is no spread, so each of their new bests counts whole).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from atoll.evolution.cma import CMAES
from atoll.evolution.strategy import Strategy, Told
from atoll.individual import Individual, Origin

WINDOW = 100
"""Results over which the credit per candidate is remembered (an exponential forgetting horizon)."""

FLOOR = 0.01
"""The least probability either strategy keeps while the island keeps finding new bests."""

STALLED_FLOOR = 0.25
"""The least probability either strategy keeps once the island has stalled: a strategy locked
out on a landscape it would have crossed gets tried again."""

PATIENCE = 3.0
"""A stall is this many of the island's usual gaps between new bests without one (a gap is at
least one generation of CMA-ES); the floor grows from FLOOR to STALLED_FLOOR over as many
more."""

GAP_MEMORY = 0.2
"""The weight of the latest gap in the usual gap (an exponential average over about five)."""

PURSUIT = 0.1
"""How far each result moves the probability of CMA-ES towards its target (Thierens's beta)."""

PRIOR = 0.1
"""Pseudo-tries (half a credit each) in the pooled rate: before any result it is 1/2."""

SHRINK = 10.0
"""Pseudo-tries at the pooled rate in each strategy's rate (chosen against 0, 2 and 5:
benchmarks/EARLIER-RUNS.md)."""

BY_CMAES, BY_GA = 0, 1
_CREDITED = {Origin.CMAES: BY_CMAES, Origin.GA: BY_GA}


def spread(ranked: Sequence[Individual], count: int) -> float:
    """The gap between the best loss and the ``count``-th best of a population ranked best
    first (inf while it holds fewer than two)."""
    top = ranked[:count]
    return top[-1].loss - top[0].loss if len(top) >= 2 else float("inf")


def gain_credit(gain: float, scale: float) -> float:
    """The credit of a new best that improved the island's best by ``gain``, in units of the
    island's spread ``scale``: ``gain / scale``, at most 1; a whole 1 when either is not a
    finite positive number (the first result, a population of equal losses)."""
    if not (math.isfinite(gain) and math.isfinite(scale) and scale > 0.0):
        return 1.0
    return min(1.0, gain / scale)


class Hybrid:
    """Breeds one individual with CMA-ES or the GA, chosen by their recent success."""

    def __init__(self, cmaes: CMAES, ga: Strategy) -> None:
        self.cmaes = cmaes
        self.ga = ga
        self.tries = [0.0, 0.0]
        self.credits = [0.0, 0.0]
        self.cmaes_share = 0.5
        """The probability that the next candidate comes from CMA-ES."""
        self._best = float("inf")
        self._spread = float("inf")
        """The island's spread at the last ask: its ``generation``-th best loss minus its best."""
        self._stalled = 0
        """Credited results since the island's last new best."""
        self._gap = 1.0
        """The usual number of credited results from one new best of the island to the next."""
        self._told = Told()

    def __repr__(self) -> str:
        return f"Hybrid({self.cmaes!r}, {self.ga!r}, cmaes_share={self.cmaes_share:.2f})"

    def _leader(self) -> int:
        """The strategy with the higher recent credit per candidate, each shrunk towards the pooled
        one (CMA-ES on a tie)."""
        (cmaes_credit, ga_credit), (cmaes_tries, ga_tries) = self.credits, self.tries
        pooled = (cmaes_credit + ga_credit + PRIOR / 2) / (cmaes_tries + ga_tries + PRIOR)
        cmaes = (cmaes_credit + SHRINK * pooled) / (cmaes_tries + SHRINK)
        ga = (ga_credit + SHRINK * pooled) / (ga_tries + SHRINK)
        return BY_CMAES if cmaes >= ga else BY_GA

    def floor(self) -> float:
        """The least probability either strategy has now: FLOOR, growing towards
        STALLED_FLOOR once the island has gone PATIENCE usual gaps without a new best."""
        usual = max(self._gap, self.cmaes.generation)
        over = self._stalled / usual / PATIENCE - 1.0
        return FLOOR + (STALLED_FLOOR - FLOOR) * min(1.0, max(0.0, over))

    def tell(self, result: Individual) -> None:
        self._told.add(result)
        self.cmaes.tell(result)
        self.ga.tell(result)

    def ask(self, individuals: Sequence[Individual], rng: random.Random,
            ident: int) -> Individual:
        self._credit()
        self._spread = spread(individuals, self.cmaes.generation)
        floor = self.floor()
        share = min(max(self.cmaes_share, floor), 1.0 - floor)
        pick = self.cmaes if rng.random() < share else self.ga
        child = pick.ask(individuals, rng, ident)
        assert isinstance(child, Individual)  # neither breeds a continuation
        return child

    def _credit(self) -> None:
        forget = 1.0 - 1.0 / WINDOW
        for ind in self._told.take():
            if not ind.usable:
                continue
            strategy = _CREDITED.get(ind.origin)
            improved = ind.loss < self._best
            credit = gain_credit(self._best - ind.loss, self._spread) if improved else 0.0
            self._best = min(self._best, ind.loss)
            if strategy is None:
                continue
            self._stalled += 1
            if improved:
                self._gap += GAP_MEMORY * (self._stalled - self._gap)
                self._stalled = 0
            tries, credits = self.tries, self.credits
            tries[0] *= forget
            tries[1] *= forget
            credits[0] *= forget
            credits[1] *= forget
            tries[strategy] += 1.0
            credits[strategy] += credit
            target = 1.0 - FLOOR if self._leader() == BY_CMAES else FLOOR
            self.cmaes_share += PURSUIT * (target - self.cmaes_share)
