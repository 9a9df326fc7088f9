"""Objective functions shared by every side of the benchmark (Atoll, Propulate, the control).

Both optimizers call the very same Python function, so one evaluation costs the same on both
sides. ``sleep_objective(params, ctx)`` has Atoll's signature; the Propulate side passes a small
stand-in for ``ctx`` that only carries ``options``. It imports nothing but the standard library
and numpy, so it works in both virtual environments (Propulate's pins an older numpy).

Options: ``function`` (one of FUNCTIONS, default "sphere") and ``sleep`` (seconds, default 0).
If the environment variable STAMP_ENV names a directory, the first call in each process writes
the time of that call (``time.time()``) to a file named by the process id there: the startup
measurement takes the earliest of them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

STAMP_ENV = "BENCH_STAMP_DIR"

# name: (function of a vector, low, high, dimensions as in examples/*.toml)
FUNCTIONS: dict[str, tuple[Any, float, float, int]] = {}


def _register(low: float, high: float, dims: int):
    def add(function):
        FUNCTIONS[function.__name__] = (function, low, high, dims)
        return function
    return add


@_register(-5.12, 5.12, 2)
def sphere(x: np.ndarray) -> float:
    return float(np.sum(x * x))


@_register(-2.048, 2.048, 2)
def rosenbrock(x: np.ndarray) -> float:
    return float(np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2))


@_register(-5.12, 5.12, 4)
def rastrigin(x: np.ndarray) -> float:
    return float(10.0 * x.size + np.sum(x * x - 10.0 * np.cos(2.0 * np.pi * x)))


@_register(-32.768, 32.768, 4)
def ackley(x: np.ndarray) -> float:
    n = x.size
    return float(-20.0 * np.exp(-0.2 * np.sqrt(np.sum(x * x) / n))
                 - np.exp(np.sum(np.cos(2.0 * np.pi * x)) / n) + 20.0 + np.e)


@_register(-600.0, 600.0, 4)
def griewank(x: np.ndarray) -> float:
    i = np.arange(1, x.size + 1, dtype=np.float64)
    return float(1.0 + np.sum(x * x) / 4000.0 - np.prod(np.cos(x / np.sqrt(i))))


@_register(-500.0, 500.0, 4)
def schwefel(x: np.ndarray) -> float:
    return float(418.9828872724339 * x.size - np.sum(x * np.sin(np.sqrt(np.abs(x)))))


@_register(-5.12, 5.12, 4)
def step(x: np.ndarray) -> float:
    return float(np.sum(np.floor(x + 0.5) ** 2))


def space(function: str, dims: int | None = None) -> dict[str, tuple[float, float]]:
    """Parameter name -> (low, high) for ``function``: x0..x{n-1}, n = ``dims`` or as in
    examples/*.toml."""
    _, low, high, default_dims = FUNCTIONS[function]
    return {f"x{i}": (low, high) for i in range(dims or default_dims)}


def space_table(function: str, dims: int | None = None) -> dict[str, dict[str, Any]]:
    """The same space as Atoll's ``[space]`` config table: float parameters."""
    return {name: {"type": "float", "low": low, "high": high}
            for name, (low, high) in space(function, dims).items()}


_stamped = False


def _stamp() -> None:
    global _stamped
    _stamped = True
    folder = os.environ.get(STAMP_ENV)
    if folder:
        with open(os.path.join(folder, str(os.getpid())), "w") as f:
            f.write(repr(time.time()))


def sleep_objective(params: Mapping[str, Any], ctx: Any) -> float:
    """Sleep ``options["sleep"]`` seconds, then return ``options["function"]`` at ``params``."""
    if not _stamped:
        _stamp()
    options = ctx.options
    seconds = options.get("sleep", 0.0)
    if seconds > 0:
        time.sleep(seconds)
    function = FUNCTIONS[options.get("function", "sphere")][0]
    return function(np.fromiter(params.values(), dtype=np.float64, count=len(params)))


class Options:
    """The part of Atoll's ``ctx`` that ``sleep_objective`` reads, for the other sides."""

    def __init__(self, **options: Any) -> None:
        self.options = options
