"""Results of a command objective as ``ATOLL`` lines, for scripts that prefer a call.

A script run by ``[objective] command`` needs no Atoll import: it prints these lines itself::

    ATOLL epoch=3 val_loss=0.25 val_accuracy=0.9    one epoch's metrics (ctx.report)
    ATOLL result=0.123                              the evaluation's value

Only the lines of the worker's first rank (``RANK=0``) count. With ``objective.results =
"file"`` the same lines are appended to the file ``ATOLL_RESULTS_FILE`` names instead. This
module writes them where they are read (standard library, nothing else imported), at once, so
Atoll sees each epoch as it ends.
"""

from __future__ import annotations

import os

PREFIX = "ATOLL "
RESULTS_FILE = "ATOLL_RESULTS_FILE"
"""The variable that names the results file of ``objective.results = "file"``."""


def report(epoch: int, **metrics: float) -> None:
    """One epoch's metrics: ``ATOLL epoch=<epoch> name=value ...``."""
    words = " ".join(f"{name}={float(value)!r}" for name, value in metrics.items())
    _say(f"{PREFIX}epoch={int(epoch)} {words}".rstrip())


def result(value: float) -> None:
    """The evaluation's value: ``ATOLL result=<value>``."""
    _say(f"{PREFIX}result={float(value)!r}")


def _say(line: str) -> None:
    path = os.environ.get(RESULTS_FILE)
    if not path:
        print(line, flush=True)
        return
    with open(path, "a", encoding="utf-8") as out:  # one write: the reader sees whole lines
        out.write(line + "\n")
