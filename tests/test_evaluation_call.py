"""The rules of one objective call (atoll.evaluation.call), in process: what counts as a loss,
and that whatever the objective does becomes data, never the end of the job."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from atoll.evaluation.call import evaluate
from atoll.individual import Status


@dataclass
class Seen:
    """The two things ``evaluate`` reads of a context: which rank warns, and the id it names."""

    is_leader: bool = True
    individual_id: int = 7


def outcome(objective: Callable[..., Any], timeout: float = 0.0) -> tuple[float, Status, str]:
    return evaluate(objective, {"x": 1.0}, Seen(), timeout)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0.25, 3, np.float32(0.25), np.int64(3), np.array(0.25)])
def test_real_numbers_of_any_kind_are_losses(value: Any) -> None:
    loss, status, error = outcome(lambda params, ctx: value)
    assert (status, error) == (Status.OK, "") and loss == float(value)
    assert type(loss) is float


@pytest.mark.parametrize(("value", "says"), [
    (True, "objective returned bool, not a number"),
    ("0.5", "objective returned str, not a number"),
    (None, "objective returned NoneType, not a number"),
    ([0.5], "objective returned list, not a number"),
    (10 ** 400, "OverflowError: objective returned an unusable value"),
    (math.inf, "objective returned a non-finite loss (inf)"),
    (np.float64("nan"), "objective returned a non-finite loss (nan)"),
])
def test_what_is_not_a_finite_number_fails_the_individual(value: Any, says: str) -> None:
    loss, status, error = outcome(lambda params, ctx: value)
    assert status == Status.FAILED and math.isnan(loss)
    assert says in error, error


def quits(params: Any, ctx: Any) -> float:
    sys.exit(3)


def interrupts(params: Any, ctx: Any) -> float:
    raise KeyboardInterrupt


def misspells(params: Any, ctx: Any) -> float:
    return params["hiden"]


@pytest.mark.parametrize(("objective", "says"), [
    (quits, "SystemExit: 3"),
    (interrupts, "KeyboardInterrupt"),
    (misspells, "KeyError: 'hiden'"),
])
def test_whatever_the_objective_raises_is_one_line_of_data(objective: Callable[..., float],
                                                            says: str) -> None:
    loss, status, error = outcome(objective)
    assert status == Status.FAILED and math.isnan(loss) and error == says


def test_a_long_error_is_cut_and_says_so() -> None:
    def shouts(params: Any, ctx: Any) -> float:
        raise ValueError("x" * 5000)

    error = outcome(shouts)[2]
    assert len(error) == 1000 and error.startswith("ValueError: xxx")
    assert error.endswith("xxx [cut: the whole error is in the logs]")


def test_eval_timeout_cuts_a_sleeping_objective_short() -> None:
    def sleeps(params: Any, ctx: Any) -> float:
        time.sleep(30)
        return 0.0

    started = time.monotonic()
    loss, status, error = outcome(sleeps, timeout=0.2)
    assert time.monotonic() - started < 5
    assert status == Status.FAILED and "search.eval_timeout = 0.2 s" in error


def test_no_timeout_leaves_a_quick_objective_alone() -> None:
    assert outcome(lambda params, ctx: params["x"] * 2, timeout=5.0)[:2] == (2.0, Status.OK)
