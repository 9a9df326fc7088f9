"""Atoll: asynchronous island-model evolutionary hyperparameter search over MPI.

Importing this package is cheap on purpose: it neither imports torch nor starts MPI.
The user-facing API lives in :mod:`atoll.api` and is re-exported lazily here, with
:class:`Context`, the type of the ``ctx`` an objective receives, and the :mod:`atoll.record`
reader (``atoll.record.open_run``).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["Context", "__version__", "best", "load_config", "record", "search"]


def __getattr__(name: str) -> Any:
    """Load the API on first use, so ``import atoll`` stays fast."""
    if name in ("search", "load_config", "best"):
        from atoll import api

        return getattr(api, name)
    if name == "Context":
        from atoll.evaluation.context import Context

        return Context
    if name == "record":
        import atoll.record

        return atoll.record
    raise AttributeError(f"module 'atoll' has no attribute {name!r}")
