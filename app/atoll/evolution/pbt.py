"""Population-based training (Jaderberg et al., 2017) as an asynchronous Atoll strategy.

PBT's members are lineages of evaluations: each evaluation trains a member on for one segment
(the objective's epochs per evaluation are PBT's ``ready``) from the checkpoint of the
evaluation before it. When a worker's member finished a segment, the worker asks again:

- *exploit* by truncation: if the member ranks in the bottom ``fraction`` of the island's
  members (or failed), it is replaced by a copy of a member drawn from the top ``fraction``,
  whose checkpoint the child starts from;
- *explore*: the copy's parameters are perturbed (floats times ``1 - perturb`` or
  ``1 + perturb``, ints and categoricals to a neighbouring value) or, each with probability
  ``resample``, drawn anew from the space;
- otherwise the member trains on with its own parameters from its own checkpoint.

Until the island has ``population_size`` members, new ones start at random, and so does one
whenever every member waits at a rung (``asha``) or trains on another worker: partners hear
what each other began (:meth:`PBT.started`), so no two children replace one member (unless
two workers pick it within one message's flight). A child's parents are (source, replaced
member) when it copied another member and (member, none) when it trained its member on
(:func:`atoll.individual.replaced_member`); the members are the island's own results no later
result replaced, learned only from :meth:`PBT.tell`.

Islands exchange weights through migration: a copy from another island
(:func:`atoll.individual.is_copy`) is no member (nobody here trains it on, so as a member it
would never leave, fill the population and shield a bad member from truncation), but while it
is among the island's best ``keep`` (whose checkpoints the island holds) it is one of the
individuals a replaced member may copy: the top ``fraction`` is taken from the members and those.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from atoll.config import PbtConfig
from atoll.individual import NO_PARENT, Individual, Origin, Status, is_copy, replaced_member
from atoll.space import CategoricalParam, FloatParam, IntParam, Params, Space


def explore(params: Params, space: Space, rng: random.Random, settings: PbtConfig,
            fixed: Sequence[str] = ()) -> Params:
    """PBT's explore step: a perturbed or resampled copy of ``params`` (``fixed`` ones kept)."""
    out = dict(params)
    for param in space.params:
        if param.name in fixed:
            continue
        if rng.random() < settings.resample:
            out[param.name] = param.sample(rng)
        elif isinstance(param, FloatParam):
            factor = 1.0 - settings.perturb if rng.random() < 0.5 else 1.0 + settings.perturb
            out[param.name] = param.clip(params[param.name] * factor)
        else:
            out[param.name] = _neighbour(param, params[param.name], rng)
    return out


def _neighbour(param: IntParam | CategoricalParam, value: object, rng: random.Random) -> object:
    """One step up or down (at a bound: the one step there is)."""
    if isinstance(param, IntParam):
        assert isinstance(value, int)
        steps = [v for v in (value - 1, value + 1) if param.low <= v <= param.high]
        return steps[rng.randrange(len(steps))] if steps else value
    index = param.index(value)
    steps = [i for i in (index - 1, index + 1) if 0 <= i < len(param.choices)]
    return param.choices[steps[rng.randrange(len(steps))]] if steps else value


class PBT:
    """One worker's PBT on an island: it trains on the members it owns, oldest first."""

    def __init__(self, space: Space, population_size: int, worker: int,
                 settings: PbtConfig | None = None, fixed: Sequence[str] = (),
                 keep: int = 0) -> None:
        self.space = space
        self.population_size = population_size
        self.worker = worker
        self.settings = settings or PbtConfig()
        self.fixed = tuple(fixed)
        self.keep = keep
        self.members: dict[int, Individual] = {}
        self.busy: set[int] = set()  # members whose child trains or is paused at a rung

    def __repr__(self) -> str:
        return (f"PBT(population_size={self.population_size}, worker={self.worker}, "
                f"{self.settings!r}, fixed={self.fixed!r}, keep={self.keep})")

    def ask(self, ranked: Sequence[Individual], rng: random.Random, ident: int) -> Individual:
        if len(self.members) < self.population_size:
            return Individual(id=ident, params=self.space.sample(rng), origin=Origin.RANDOM)
        order = sorted(self.members.values(), key=_rank)
        free = [m for m in order if m.id not in self.busy]
        if not free:  # every member waits at a rung or trains elsewhere: two children must
            # never replace one member, so a new one starts, as successive halving starts a
            # new candidate when it can promote none
            return Individual(id=ident, params=self.space.sample(rng), origin=Origin.RANDOM)
        # A member is its owner's: the worker that evaluated it in this job, the one the
        # restore gave it to in a resumed one (whose layout may have other workers). One whose
        # own all wait trains a partner's free member; partners hear it began (started).
        mine = [m for m in free if m.owner == self.worker] or free
        member = min(mine, key=lambda m: m.id)  # the one waiting longest
        self.busy.add(member.id)  # until the child's result comes back
        cut = max(1, math.floor(self.settings.fraction * len(order)))
        if order.index(member) < len(order) - cut and member.usable:
            return Individual(id=ident, params=dict(member.params), origin=Origin.PBT,
                              parents=(member.id, NO_PARENT), inherit_from=member.id)
        visitors = [ind for ind in ranked[:self.keep] if is_copy(ind) and ind.usable]
        best = sorted([*order, *visitors], key=_rank)[:cut]
        top = [m for m in best if m.usable and m.id != member.id] or [member]
        source = top[rng.randrange(len(top))]
        return Individual(id=ident, params=explore(source.params, self.space, rng,
                                                   self.settings, self.fixed),
                          origin=Origin.PBT, parents=(source.id, member.id),
                          inherit_from=source.id)

    def started(self, candidate: Individual) -> None:
        """A partner began ``candidate``: the member it replaces is busy until its result."""
        replaced = replaced_member(candidate)
        if replaced != NO_PARENT:
            self.busy.add(replaced)

    def tell(self, result: Individual) -> None:
        if is_copy(result):  # no member here
            return
        replaced = replaced_member(result)
        if result.status == Status.PAUSED:  # no member yet; the one it trains on waits for it
            if replaced != NO_PARENT:
                self.busy.add(replaced)
            return
        self.busy.discard(replaced)
        self.members.pop(replaced, None)
        self.members[result.id] = result


def _rank(ind: Individual) -> tuple[bool, float, int]:
    """Best first; failed (no finite loss) last."""
    return (not ind.usable, ind.loss if ind.usable else math.inf, ind.id)
