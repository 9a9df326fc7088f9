"""Importing cmaes without scipy.

cmaes imports ``scipy.stats`` when it can, for two functions (a normal CDF and a chi-squared
quantile with one degree of freedom) that it also ships in pure Python and numpy for when scipy
is missing; importing scipy.stats is most of a CMA-ES rank's start-up, and every rank pays it.
Hiding scipy while cmaes is imported makes cmaes take its own versions (equal to scipy's to
about 1e-14). A process that has imported scipy already keeps it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def without_scipy() -> Iterator[None]:
    """While inside, ``import scipy`` fails with ImportError (unless scipy is loaded)."""
    if "scipy" in sys.modules:
        yield
        return
    sys.modules["scipy"] = None  # type: ignore[assignment]  # the import system's "not found"
    try:
        yield
    finally:
        if sys.modules.get("scipy", 0) is None:
            del sys.modules["scipy"]
