"""Atoll: asynchronous island-model evolutionary hyperparameter search over MPI.

Importing this package is cheap on purpose: it neither imports torch nor starts MPI.
The user-facing API lives in :mod:`atoll.api` and is re-exported lazily here.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "search", "load_config"]


def __getattr__(name: str) -> Any:
    """Load the API on first use, so ``import atoll`` stays fast."""
    if name in ("search", "load_config"):
        from atoll import api

        return getattr(api, name)
    raise AttributeError(f"module 'atoll' has no attribute {name!r}")
