"""What an objective sees of Atoll: the evaluation context ``ctx``.

An objective is ``objective(params, ctx) -> loss`` and ``ctx`` is the only Atoll object it
touches: it never sees message tags, files or the population.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch
    from mpi4py import MPI

EpochSink = Callable[[int, int, float, Mapping[str, float]], None]
"""Receives (individual id, epoch, unix time, metrics) on the worker leader."""
WeightSink = Callable[[int, float, Mapping[str, Any]], Any]
"""Receives (individual id, loss, state_dict) on the worker leader."""


@dataclass
class Context:
    """Everything one evaluation may use.

    ``comm`` is the worker's own communicator (all ranks that evaluate this individual
    together); ``rng`` is seeded from the run seed and the individual id, so a rank's random
    stream does not depend on which worker happens to evaluate the individual.
    """

    comm: MPI.Comm
    individual_id: int
    seed: int = 0
    """The run's seed; with ``individual_id`` it seeds ``rng``."""
    data_dir: Path | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    backend: str = "auto"
    timeout: float = 60.0
    local_rank: int = 0
    """This rank's index among the job's ranks on its node."""
    _sink: EpochSink | None = field(default=None, repr=False)
    _weights: WeightSink | None = field(default=None, repr=False)
    _should_stop: Callable[[], bool] | None = field(default=None, repr=False)
    interrupted: bool = False
    """Set when ``report`` told the objective to stop because the job is stopping."""

    @functools.cached_property
    def rng(self) -> np.random.Generator:
        """This individual's random stream, the same on every rank of the worker. Made on
        first use: seeding a generator costs more than a cheap objective."""
        return np.random.default_rng([self.seed, self.individual_id])

    @property
    def rank(self) -> int:
        return self.comm.Get_rank()

    @property
    def size(self) -> int:
        return self.comm.Get_size()

    @property
    def is_leader(self) -> bool:
        """Only the leader's return value counts, and only it records epochs."""
        return self.comm.Get_rank() == 0

    @property
    def process_group(self) -> Any:
        """The worker's torch process group (NCCL with GPUs, else gloo), made once per worker.

        First use is collective: every rank of the worker must ask for it (or for ``device``).
        """
        return self._group().process_group

    @property
    def device(self) -> torch.device:
        """This rank's device: ``cuda:<node-local rank>`` under NCCL, else the CPU."""
        return self._group().device

    def _group(self) -> Any:
        from atoll.distributed import worker_group

        return worker_group(self.comm, self.backend, self.timeout, self.local_rank)

    def report(self, epoch: int, **metrics: float) -> bool:
        """Record one epoch's metrics; answers whether to stop this evaluation early.

        Call it on every rank of the worker with the same epoch; the leader records. The answer
        is the same on every rank: ``True`` once the job is asked to stop (a signal or the
        wall time), and then the individual is recorded as interrupted whatever it returns.
        """
        if self._sink is not None:
            self._sink(self.individual_id, int(epoch), time.time(),
                       {k: float(v) for k, v in metrics.items()})
        if self._should_stop is not None and self._should_stop():
            self.interrupted = True
        return self.interrupted

    def keep_weights(self, state_dict: Mapping[str, Any], loss: float) -> None:
        """Offer this evaluation's best weights (plain tensors, no ``module.`` prefix).

        The leader stores them (HDF5, no pickle) if the loss ranks among the run's best
        ``record.top_models``; other ranks may call it too, it does nothing there.
        """
        if self._weights is not None and self.is_leader:
            self._weights(self.individual_id, float(loss), state_dict)
