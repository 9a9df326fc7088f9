"""The objective's own check before a job, shared by the search and ``atoll doctor``."""

from __future__ import annotations

from atoll.config import Config
from atoll.errors import AtollError, ObjectiveError, described
from atoll.evaluation.call import Objective
from atoll.objectives.loader import check_preflight


def preflight(objective: Objective, config: Config) -> None:
    """An objective may check its options and data once before the job begins, through a
    ``preflight(options, data_dir, parameter_names)`` attribute, so that bad input stops the
    job with one line instead of failing every individual."""
    name = config.objective.name
    check = check_preflight(name, objective)
    if check is None:
        return
    try:
        check(config.objective.options, config.objective.data_dir or None, config.space.names)
    except AtollError:
        raise
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001 - bad input
        raise ObjectiveError(f"objective.name: the preflight of {name!r} failed with "
                             f"{described(exc)}") from None
