"""Objectives the tests name as ``objectives:NAME`` (tests/ is put on PYTHONPATH)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from atoll.objectives.benchmarks import BENCHMARKS


def slow_sphere(params: Mapping[str, Any], ctx: Any) -> float:
    """Sphere that takes ``options.sleep`` seconds, reporting two epochs on the way."""
    pause = float(ctx.options.get("sleep", 0.01))
    for epoch in range(2):
        time.sleep(pause / 2)
        ctx.report(epoch, half=float(epoch))
    return BENCHMARKS["sphere"](params, ctx)
