"""DDP training throughput: a 2-rank worker against a 1-rank worker, same data, same network.

Two real ``atoll search`` runs of examples/digits.toml with a one-point space (conv_layers,
activation, lr and gamma each fixed to one value: low == high, one choice), so both train the
same network on the same training set (digits, the same validation split):

- ``mpirun -n 2``, ``search.ranks_per_worker=2``: DDP over gloo, each rank on its half;
- ``mpirun -n 1``, ``search.ranks_per_worker=1``: the plain model on the whole training set.

Same per-rank batch size on both (digits.toml's 8): the 2-rank worker takes half as many steps
per epoch on a global batch of 16 (DDP's usual weak scaling). One individual of EPOCHS epochs
each (patience = EPOCHS: no early stop); the classifier's ``samples_per_second`` metric counts
the samples the whole worker trained on per second of the epoch's training loop (validation
excluded). The median over epochs 2..EPOCHS is reported (the first epoch warms up). Both run
with torch's default threads (as many as cores: 4 threads on 2 cores for the 2-rank worker).
CPU only, 2 cores: not a GPU result. No target: reported only.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

import common
from common import Row
from ddp_setup import atoll_search, value_of

EPOCHS = 6
POINT = {"conv_layers": 6, "activation": "relu", "lr": 0.005, "gamma": 0.9}


def one_point_space() -> list[str]:
    """Overrides that pin digits.toml's space to POINT."""
    sets = [f"space.conv_layers.low={POINT['conv_layers']}",
            f"space.conv_layers.high={POINT['conv_layers']}",
            f"space.activation.choices=[\"{POINT['activation']}\"]"]
    for name in ("lr", "gamma"):
        sets += [f"space.{name}.low={POINT[name]}", f"space.{name}.high={POINT[name]}"]
    return sets


def throughput(ranks: int, workdir: Path) -> list[float]:
    """samples/s of each epoch of one individual trained by a worker of ``ranks`` ranks."""
    record = atoll_search(ranks, [*one_point_space(), "search.islands=1",
                                  "search.generations=1", f"search.ranks_per_worker={ranks}",
                                  f"objective.options.epochs={EPOCHS}",
                                  f"objective.options.patience={EPOCHS}",
                                  "objective.options.num_workers=0"],
                          workdir, f"ranks{ranks}")
    (ind,) = record.individuals
    got = {p: value_of(ind[p]) for p in POINT}
    if got != POINT:
        raise RuntimeError(f"{ranks} ranks trained {got}, expected {POINT}")
    epochs = record.epochs[record.epochs["individual"] == ind["id"]]
    rates = [float(r) for r in epochs[epochs["epoch"].argsort()]["samples_per_second"]]
    if len(rates) != EPOCHS:
        raise RuntimeError(f"{ranks} ranks: {len(rates)} epochs recorded, expected {EPOCHS}")
    return rates


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-ddp-throughput-"))
    two = throughput(2, workdir)
    one = throughput(1, workdir)
    med2, med1 = statistics.median(two[1:]), statistics.median(one[1:])
    runs = (f"2 ranks {', '.join(f'{r:.0f}' for r in two)}; "
            f"1 rank {', '.join(f'{r:.0f}' for r in one)}")
    log(f"  DDP throughput per epoch (samples/s): {runs}")
    row = Row(f"DDP training throughput, 2-rank vs 1-rank worker (digits, the same network, "
              f"batch 8 per rank; median of epochs 2..{EPOCHS}; CPU, 2 cores: not a GPU "
              "result)",
              f"2 ranks {med2:.0f} samples/s", f"1 rank {med1:.0f} samples/s",
              f"{med2 / med1:.2f}", "report")
    note = (f"DDP throughput, samples/s per epoch, network {POINT}, {EPOCHS} epochs: {runs}; "
            "ratio = 2 ranks / 1 rank")
    shutil.rmtree(workdir)  # kept only when something failed
    return [row], [note]


if __name__ == "__main__":
    common.standalone(run)
