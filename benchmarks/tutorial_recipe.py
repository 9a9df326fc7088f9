"""The tutorial's per-individual DDP recipe, timed: mpirun -n 2 python tutorial_recipe.py IN OUT

A re-implementation (not a copy) of what the well-known Propulate PyTorch DDP tutorial
(tutorials/torch_ddp_example.py) does inside its loss function for EVERY individual, so that
Atoll's per-individual setup can be compared with it on the same machine, data and network:

1. process group: the worker's rank 0 host name is broadcast over the worker's communicator,
   a new ``TCPStore`` is made (rank 0 hosts it) and ``init_process_group("gloo")`` runs over
   the worker's ranks, followed by the tutorial's ``barrier`` and ``all_reduce`` check (with
   its 1 ms x rank stagger). The tutorial reuses port 29500 + worker id for every individual;
   here every individual gets a new port (rank 0 asks the OS for a free one): a second store
   on the same port in the same process can fail with EADDRINUSE (see shared/MACHINE.md),
   and a fresh port only makes the recipe work, not slower;
2. data: the data set is read from disk again (scikit-learn's ``load_digits()`` reads its
   CSV on every call), then the same split, scaling and normalisation as Atoll's
   ``atoll.objectives.data`` (the fixed 80% training part, the seeded validation split) into
   per-sample ``TensorDataset``s, as the tutorial's torchvision data sets are;
3. loaders: new training and validation ``DataLoader``s with ``num_workers=2`` loader
   processes, ``persistent_workers=True`` and a ``DistributedSampler`` each (pinned memory
   only where CUDA is available: this machine has none);
4. model: the same network as Atoll's classifier (``build_model_from_params``), moved to the
   device, wrapped in ``DistributedDataParallel``, Adadelta and StepLR;
5. the first training step: ``iter(loader)`` (this forks the 2 loader processes) and the first
   batch; the clock stops when that batch is in hand, i.e. when the first step starts. The
   step itself (forward, backward, optimizer step and the tutorial's loss all_reduce) is then
   taken, the loaders are dropped (their processes end) and ``destroy_process_group()`` runs,
   as the tutorial does at the end of every individual.

The clock starts on every rank right after a barrier, with the individual's parameters in hand;
rank 0's times are reported (Atoll's leader reports its own ``setup_seconds`` the same way).
Imports happen once, at the top, as in the tutorial, so they are in no individual's time.

IN is JSON: {"individuals": [params, ...], "batch_size": 8, "val_fraction": 0.2,
"split_seed": 0, "num_workers": 2, "eval_batch_size": 512}. Rank 0 writes OUT: one JSON object
per individual with ``setup_seconds`` and its parts (seconds).
"""

from __future__ import annotations

import gc
import json
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from mpi4py import MPI
from sklearn.datasets import load_digits
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from atoll.objectives import data as atoll_data
from atoll.objectives.classifier import build_model_from_params

TIMEOUT = timedelta(seconds=60)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def init_group(comm: MPI.Comm) -> Any:
    """A new store on a new port and a new gloo process group over the worker's ranks."""
    rank, size = comm.Get_rank(), comm.Get_size()
    address = comm.bcast((socket.gethostname(), free_port()) if rank == 0 else None, root=0)
    time.sleep(0.001 * rank)  # the tutorial's stagger, "to avoid DDOS'ing rank 0"
    store = dist.TCPStore(address[0], address[1], size, is_master=rank == 0, timeout=TIMEOUT)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size, timeout=TIMEOUT)
    dist.barrier()
    probe = torch.ones(1)
    dist.all_reduce(probe)
    if int(probe.item()) != size:
        raise RuntimeError(f"all_reduce check failed: {probe.item()} != {size}")
    return store


def read_digits(val_fraction: float, split_seed: int) -> tuple[TensorDataset, TensorDataset]:
    """Read from disk now; the same samples and normalisation as Atoll's digits training set."""
    digits = load_digits()
    order = np.random.default_rng(0).permutation(len(digits.target))
    n_test = round(len(order) * atoll_data.DIGITS_TEST_FRACTION)
    rows = np.sort(order[n_test:])  # the training split; the test split stays held out
    images = torch.as_tensor(digits.images[rows], dtype=torch.float32).unsqueeze(1) / 16.0
    images = (images - atoll_data.DIGITS_MEAN) / atoll_data.DIGITS_STD
    labels = torch.as_tensor(digits.target[rows], dtype=torch.long)
    split = np.random.default_rng(split_seed).permutation(len(labels))
    n_val = round(len(labels) * val_fraction)
    train_rows = torch.as_tensor(np.sort(split[n_val:]))
    val_rows = torch.as_tensor(np.sort(split[:n_val]))
    return (TensorDataset(images[train_rows], labels[train_rows]),
            TensorDataset(images[val_rows], labels[val_rows]))


def loaders(train_set: TensorDataset, val_set: TensorDataset, batch_size: int,
            eval_batch_size: int, num_workers: int, seed: int
            ) -> tuple[DataLoader[Any], DataLoader[Any], DistributedSampler[Any]]:
    pin = torch.cuda.is_available()
    sampler: DistributedSampler[Any] = DistributedSampler(train_set, shuffle=True, seed=seed)
    train = DataLoader(train_set, batch_size=batch_size, sampler=sampler,
                       num_workers=num_workers, pin_memory=pin, persistent_workers=True)
    val = DataLoader(val_set, batch_size=eval_batch_size,
                     sampler=DistributedSampler(val_set, shuffle=False),
                     num_workers=num_workers, pin_memory=pin, persistent_workers=True)
    return train, val, sampler


def individual(comm: MPI.Comm, params: dict[str, Any], opts: dict[str, Any], seed: int
               ) -> dict[str, float]:
    comm.Barrier()
    t0 = time.perf_counter()  # parameters in hand
    store = init_group(comm)
    t_group = time.perf_counter()
    train_set, val_set = read_digits(opts["val_fraction"], opts["split_seed"])
    t_data = time.perf_counter()
    train_loader, val_loader, sampler = loaders(train_set, val_set, opts["batch_size"],
                                                opts["eval_batch_size"], opts["num_workers"],
                                                seed)
    t_loaders = time.perf_counter()
    torch.manual_seed(seed)
    device = torch.device("cpu")  # gloo; no GPU on this machine
    model = build_model_from_params(params, (1, 8, 8), 10).to(device)
    replica = DistributedDataParallel(model)
    optimizer = torch.optim.Adadelta(replica.parameters(), lr=float(params["lr"]))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1,
                                                gamma=float(params["gamma"]))
    t_model = time.perf_counter()
    sampler.set_epoch(0)
    batches = iter(train_loader)  # forks the loader processes
    x, y = next(batches)
    t_first = time.perf_counter()  # the first training step starts here
    replica.train()
    x, y = x.to(device), y.to(device)
    optimizer.zero_grad()
    loss = F.nll_loss(replica(x), y)
    loss.backward()
    optimizer.step()
    dist.all_reduce(loss.detach())
    scheduler.step()
    # End of the individual: loader processes end with their loaders, then the group goes.
    del batches, train_loader, val_loader, sampler, replica, optimizer, scheduler
    gc.collect()
    dist.destroy_process_group()
    del store
    return {"setup_seconds": t_first - t0, "process_group": t_group - t0,
            "read_data": t_data - t_group, "loaders": t_loaders - t_data,
            "model_ddp": t_model - t_loaders, "first_batch": t_first - t_model}


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    opts = {"batch_size": 8, "val_fraction": 0.2, "split_seed": 0, "num_workers": 2,
            "eval_batch_size": 512, **{k: v for k, v in spec.items() if k != "individuals"}}
    comm = MPI.COMM_WORLD  # the whole job is one worker, as in the Atoll run it is set against
    results = [individual(comm, params, opts, seed=i) for i, params in
               enumerate(spec["individuals"])]
    if comm.Get_rank() == 0:
        Path(sys.argv[2]).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
