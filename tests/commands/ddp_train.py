"""A torchrun-style DDP script (no Atoll import): env:// rendezvous, gloo, rank 0 reports."""

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float, required=True)
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--trace", type=Path, required=True)
args = parser.parse_args()

dist.init_process_group("gloo")  # reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
rank, world = dist.get_rank(), dist.get_world_size()
assert world == int(os.environ["LOCAL_WORLD_SIZE"]) == 2, world
trace = args.trace / f"rank{rank}.txt"
for epoch in range(args.epochs):
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)  # a real collective of the DDP world each epoch
    assert total.item() == 3.0
    with trace.open("a") as out:
        out.write(f"{epoch}\n")
    if rank == 0:
        print(f"ATOLL epoch={epoch} val_loss={args.x + 0.1 * (args.epochs - epoch)}", flush=True)
    time.sleep(0.3)
if rank == 0:
    print(f"ATOLL result={args.x}", flush=True)
dist.destroy_process_group()
