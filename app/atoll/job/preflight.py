"""The objective's own check before a job, shared by the search and ``atoll doctor``."""

from __future__ import annotations

from collections.abc import Sequence

from atoll.config import Config
from atoll.engine.topology import Layout
from atoll.errors import AtollError, LayoutError, ObjectiveError, described
from atoll.evaluation.call import Objective
from atoll.objectives.launch_env import starts_torchrun, torchrun_crowding
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


def check_torchrun_layout(config: Config, layout: Layout, hosts: Sequence[str]) -> None:
    """Refuse torchrun as the command of a worker with two ranks on a node, where each rank
    would start a torchrun of its own (``hosts``: each world rank's host, in rank order)."""
    if not starts_torchrun(config.objective.command):
        return
    crowding = torchrun_crowding([(layout.worker_of_rank(rank), host)
                                  for rank, host in enumerate(hosts)])
    if crowding:
        raise LayoutError(crowding)
