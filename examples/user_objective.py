"""A user objective: any importable ``module:function`` taking ``(params, ctx)``.

Run from the repository root (Atoll finds ``examples`` from the current directory):
    mpirun -n 4 atoll search --config examples/user.toml --run-dir runs/user
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import atoll


def noisy_quadratic(params: Mapping[str, Any], ctx: atoll.Context) -> float:
    """A toy loss over mixed parameter types; reports a few 'epochs' like a training loop."""
    scale = {"small": 0.5, "medium": 1.0, "large": 2.0}[params["size"]]
    loss = (math.log10(params["lr"]) + 3.0) ** 2 + (params["layers"] - 4) ** 2 * 0.1 * scale
    for epoch in range(3):
        if ctx.report(epoch, train_loss=loss * (3 - epoch), noise=float(ctx.rng.normal())):
            break
    return loss + 0.01 * float(ctx.rng.random())
