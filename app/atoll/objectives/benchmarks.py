"""Classic benchmark functions: cheap objectives for tests, examples and benchmarks.

Each takes the parameters in space order as a vector, so any number of dimensions works. Their
usual bounds make the default space when a config names a built-in and gives no ``[space]``.
This module imports numpy only: a benchmark search never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from atoll.config import BUILTINS


def _vector(params: Mapping[str, Any]) -> np.ndarray:
    return np.fromiter((float(v) for v in params.values()), dtype=np.float64, count=len(params))


def sphere(x: np.ndarray) -> float:
    return float(np.sum(x * x))


def rosenbrock(x: np.ndarray) -> float:
    if x.size < 2:
        return float((1.0 - x[0]) ** 2)
    return float(np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2))


def rastrigin(x: np.ndarray) -> float:
    return float(10.0 * x.size + np.sum(x * x - 10.0 * np.cos(2.0 * np.pi * x)))


def ackley(x: np.ndarray) -> float:
    n = x.size
    return float(-20.0 * np.exp(-0.2 * np.sqrt(np.sum(x * x) / n))
                 - np.exp(np.sum(np.cos(2.0 * np.pi * x)) / n) + 20.0 + np.e)


def griewank(x: np.ndarray) -> float:
    i = np.arange(1, x.size + 1, dtype=np.float64)
    return float(1.0 + np.sum(x * x) / 4000.0 - np.prod(np.cos(x / np.sqrt(i))))


def schwefel(x: np.ndarray) -> float:
    return float(418.9828872724339 * x.size - np.sum(x * np.sin(np.sqrt(np.abs(x)))))


def step(x: np.ndarray) -> float:
    return float(np.sum(np.floor(x + 0.5) ** 2))


@dataclass(frozen=True)
class Benchmark:
    """A benchmark function with its usual search bounds and its known minimum."""

    function: Callable[[np.ndarray], float]
    low: float
    high: float
    minimum: float = 0.0

    def __call__(self, params: Mapping[str, Any], ctx: Any = None) -> float:
        """The objective signature every Atoll objective has: ``(params, ctx) -> loss``."""
        return self.function(_vector(params))


_FUNCTIONS = {"sphere": sphere, "rosenbrock": rosenbrock, "rastrigin": rastrigin,
              "ackley": ackley, "griewank": griewank, "schwefel": schwefel, "step": step}
BENCHMARKS: dict[str, Benchmark] = {
    name: Benchmark(_FUNCTIONS[name], low, high) for name, (low, high) in BUILTINS.items()}
