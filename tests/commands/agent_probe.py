"""A script for torchrun to start: each process writes the rendezvous torchrun gave it to
OUT/rankN.json (its store's port, the nodes, the world), then joins its gloo world; rank 0
reports."""

import json
import os
import sys
from pathlib import Path

import torch.distributed as dist

out, x = Path(sys.argv[1]), float(sys.argv[2])
dist.init_process_group("gloo")
seen = {name: os.environ.get(name) for name in ("MASTER_PORT", "PET_MASTER_PORT",
                                                "GROUP_WORLD_SIZE", "WORLD_SIZE")}
(out / f"rank{dist.get_rank()}.json").write_text(json.dumps(seen))
dist.barrier()
if dist.get_rank() == 0:
    print(f"ATOLL result={x}", flush=True)
dist.destroy_process_group()
