"""An ordinary torchrun-style DDP training script: no Atoll import.

It reads its hyperparameters from the command line and torch.distributed's env:// variables
from its environment (torchrun sets them, and so does an Atoll command objective), and prints
its per-epoch metrics and its result as ``ATOLL ...`` lines on rank 0. Under Atoll it also
keeps a checkpoint after each epoch where ``ATOLL_CHECKPOINT_DIR`` says, and continues from
``ATOLL_RESUME_DIR`` when a stopped job's individual is continued (numpy's npz of plain arrays:
no pickle; any format of the script's own will do). Run it alone with
``torchrun --nproc-per-node 2 examples/train_script.py --lr 0.05 --hidden 32``, or as one
evaluation per individual with ``examples/command.toml``.
"""

import argparse
import os
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--hidden", type=int, default=32)
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()

backend = "nccl" if torch.cuda.is_available() else "gloo"
device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if backend == "nccl" else \
    torch.device("cpu")
if backend == "nccl":
    torch.cuda.set_device(device)  # NCCL's barrier and a bare "cuda" use the current device
dist.init_process_group(backend)  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from env://
rank, world = dist.get_rank(), dist.get_world_size()

# A small regression task, the same on every rank; each rank trains on its own shard.
data = torch.Generator().manual_seed(args.seed)
x = torch.randn(2048, 8, generator=data)
y = (x[:, :4].sum(dim=1, keepdim=True).sin() + 0.1 * torch.randn(2048, 1, generator=data))
train_x, train_y = x[:1536][rank::world].to(device), y[:1536][rank::world].to(device)
val_x, val_y = x[1536:].to(device), y[1536:].to(device)

torch.manual_seed(args.seed)
model = DistributedDataParallel(nn.Sequential(nn.Linear(8, args.hidden), nn.Tanh(),
                                              nn.Linear(args.hidden, 1)).to(device))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
loss_fn = nn.MSELoss()
params = list(model.module.parameters())


def save(directory: str, epoch: int, val_loss: float) -> None:
    """The weights and SGD's momentum as plain arrays, written whole (temporary file, rename)."""
    arrays = {f"p{i}": p.detach().cpu().numpy() for i, p in enumerate(params)}
    arrays |= {f"m{i}": optimizer.state[p]["momentum_buffer"].cpu().numpy()
               for i, p in enumerate(params)}
    np.savez(Path(directory, "state.tmp.npz"), epoch=epoch, val_loss=val_loss, **arrays)
    os.replace(Path(directory, "state.tmp.npz"), Path(directory, "state.npz"))


start = 0
if os.environ.get("ATOLL_RESUME_DIR"):  # set (and not empty) only when there is one to resume
    with np.load(Path(os.environ["ATOLL_RESUME_DIR"], "state.npz"), allow_pickle=False) as kept:
        with torch.no_grad():
            for i, p in enumerate(params):
                p.copy_(torch.from_numpy(kept[f"p{i}"]))
                optimizer.state[p]["momentum_buffer"] = torch.from_numpy(kept[f"m{i}"]).to(device)
        start, val_loss = int(kept["epoch"]) + 1, float(kept["val_loss"])
for epoch in range(start, args.epochs):
    for batch in range(0, len(train_x), 64):
        optimizer.zero_grad()
        loss_fn(model(train_x[batch:batch + 64]), train_y[batch:batch + 64]).backward()
        optimizer.step()
    with torch.no_grad():
        val_loss = loss_fn(model(val_x), val_y).item()
    if rank == 0:
        if os.environ.get("ATOLL_CHECKPOINT_DIR"):
            save(os.environ["ATOLL_CHECKPOINT_DIR"], epoch, val_loss)
        print(f"ATOLL epoch={epoch} val_loss={val_loss}", flush=True)
if rank == 0:
    print(f"ATOLL result={val_loss}", flush=True)
dist.destroy_process_group()
