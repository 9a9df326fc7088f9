"""Results of a command objective as lines on stdout, for scripts that prefer a call.

A script run by ``[objective] command`` needs no Atoll import: it prints these lines itself::

    ATOLL epoch=3 val_loss=0.25 val_accuracy=0.9    one epoch's metrics (ctx.report)
    ATOLL result=0.123                              the evaluation's value

Only the lines of the worker's first rank (``RANK=0``) count. This module only prints them
(standard library, nothing else imported), flushing at once so Atoll sees each epoch as it ends.
"""

from __future__ import annotations

PREFIX = "ATOLL "


def report(epoch: int, **metrics: float) -> None:
    """Print one epoch's metrics: ``ATOLL epoch=<epoch> name=value ...``."""
    words = " ".join(f"{name}={float(value)!r}" for name, value in metrics.items())
    print(f"{PREFIX}epoch={int(epoch)} {words}".rstrip(), flush=True)


def result(value: float) -> None:
    """Print the evaluation's value: ``ATOLL result=<value>``."""
    print(f"{PREFIX}result={float(value)!r}", flush=True)
