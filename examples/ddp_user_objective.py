"""A user's own DDP training: no process-group code, ``ctx`` brings the group and the device.

A small MLP on scikit-learn's 8x8 digits. Every rank of the worker trains one replica on its
own shard; the validation sums are added over the worker, so every rank reports the same
numbers. Run from the repository root (Atoll finds ``examples`` from the current directory):
    mpirun -n 4 --oversubscribe atoll search --config examples/ddp_user.toml \
        --run-dir runs/ddp
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import atoll


def train_mlp(params: Mapping[str, Any], ctx: atoll.Context) -> float:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from sklearn.datasets import load_digits
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    device = ctx.device  # the worker's process group exists from here on (made once)
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    order = np.random.default_rng(0).permutation(len(y))  # the same split on every rank
    val, tr = order[:360], order[360:]

    seed = int(ctx.rng.integers(2**31 - 1))  # the same on every rank: ctx.rng is per individual
    torch.manual_seed(seed)  # so every rank starts from the same weights
    hidden = int(params["hidden"])
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10)).to(device)
    ddp = DDP(model, process_group=ctx.process_group) if ctx.size > 1 else model
    opt = torch.optim.SGD(ddp.parameters(), lr=float(params["lr"]), momentum=0.9)

    # Disjoint, equally long shards (DDP needs the same number of steps on every rank).
    per_rank = len(tr) // ctx.size
    best, best_state, start = float("inf"), {}, 0
    saved = ctx.load_checkpoint()  # on every rank; None unless the evaluation was interrupted
    if saved is not None:  # continue where it stopped
        model.load_state_dict(saved.state["model"])
        opt.load_state_dict(saved.state["opt"])
        best, best_state, start = saved.state["best"], saved.state["best_state"], saved.epoch + 1
    for epoch in range(start, int(ctx.options.get("epochs", 5))):
        perm = np.random.default_rng([seed, epoch]).permutation(tr)  # same on every rank
        mine = perm[ctx.rank * per_rank:(ctx.rank + 1) * per_rank]
        ddp.train()
        for start in range(0, len(mine), 32):
            batch = torch.as_tensor(mine[start:start + 32])
            opt.zero_grad()
            loss = F.cross_entropy(ddp(x[batch].to(device)), y[batch].to(device))
            loss.backward()
            opt.step()
        # Validation: rank r takes samples r, r+size, ...; sums and counts over the worker.
        shard = torch.as_tensor(val[ctx.rank::ctx.size])
        with torch.no_grad():
            out = model(x[shard].to(device))
            sums = np.array([F.cross_entropy(out, y[shard].to(device), reduction="sum").item(),
                             (out.argmax(1).cpu() == y[shard]).sum().item(), len(shard)])
        total = np.sum(ctx.comm.allgather(sums), axis=0)  # added in rank order: same everywhere
        val_loss, accuracy = total[0] / total[2], total[1] / total[2]
        if val_loss < best:  # the same decision on every rank
            best = val_loss
            best_state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        stop = ctx.report(epoch, val_loss=val_loss, val_accuracy=accuracy)
        ctx.save_checkpoint({"model": model.state_dict(), "opt": opt.state_dict(), "best": best,
                             "best_state": best_state}, epoch)  # on every rank; the leader writes
        if stop:
            break
    ctx.keep_weights(best_state, best)  # stored (HDF5) if among the run's best
    return best
