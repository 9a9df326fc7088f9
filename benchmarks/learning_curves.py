"""A synthetic learning-curve task with a known optimum, for comparing schedulers by the
training they spend (no download, no torch; standard library only, so that every side's venv
imports it).

A candidate ``x`` in [0, 1]^4 trains for up to MAX_EPOCHS epochs; its validation loss after
epoch ``t`` (from 0) is ``penalty(x) + (t + 1) ** -rate(x)`` plus a small noise fixed by ``x``
and ``t``. ``rate`` grows with ``x[0]`` (a learning rate, say) while the penalty is least at a
low ``x[0]``: fast starters lead the middle rungs and finish worse, the trap that makes early
stopping hard on real networks, and curves still fall at the last epoch. Regret is
``fully_trained(x) - BEST`` (noiseless loss after MAX_EPOCHS) of the candidate a search picks.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

MAX_EPOCHS = 27
NAMES = ("x0", "x1", "x2", "x3")
CENTRE = (0.25, 0.7, 0.2, 0.5)
WEIGHTS = (1.0, 0.6, 0.3, 0.15)
FLOOR = 0.05
NOISE = 0.003


def penalty(x: Sequence[float]) -> float:
    return FLOOR + sum(w * (v - o) ** 2 for w, v, o in zip(WEIGHTS, x, CENTRE, strict=True))


def rate(x: Sequence[float]) -> float:
    return 0.3 + 1.5 * x[0]


def mean_loss(x: Sequence[float], epoch: int) -> float:
    return penalty(x) + (epoch + 1) ** -rate(x)


def loss_at(x: Sequence[float], epoch: int) -> float:
    """The validation loss reported after ``epoch`` (0-based)."""
    return mean_loss(x, epoch) + random.Random(f"{x}:{epoch}").gauss(0.0, NOISE)


def fully_trained(x: Sequence[float]) -> float:
    """The noiseless loss after MAX_EPOCHS: what a user gets of ``x``."""
    return mean_loss(x, MAX_EPOCHS - 1)


def _best() -> float:
    """The least ``fully_trained`` (only ``x[0]`` trades the rate against the penalty)."""
    return min(fully_trained((i / 10000, *CENTRE[1:])) for i in range(10001))


BEST = _best()


def point(params: Mapping[str, Any]) -> tuple[float, ...]:
    return tuple(float(params[name]) for name in NAMES)


def train(params: Mapping[str, Any], ctx: Any) -> float:
    """Atoll's objective: one report and one checkpoint per epoch (so that it can be paused and
    continued); stops when told (pruned, paused, or the job stops)."""
    x = point(params)
    saved = ctx.load_checkpoint()
    value = float(saved.state["value"]) if saved is not None else math.nan
    for epoch in range(saved.epoch + 1 if saved is not None else 0, MAX_EPOCHS):
        value = loss_at(x, epoch)
        stop = ctx.report(epoch, val_loss=value)
        ctx.save_checkpoint({"value": value}, epoch)
        if stop:
            break
    return value
