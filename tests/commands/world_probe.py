"""A torchrun-style script whose libraries look around as Lightning's does: it writes what it
sees of its launch (torchrun's variables, any MPI launcher's, its GPUs, the MPI world its own
``MPI_Init`` joins, whether another program could take its store's port) to OUT/rankN.json,
then joins the worker's gloo world; rank 0 reports. Under Slurm it takes its rank and world
from ``SLURM_PROCID`` and ``SLURM_NTASKS``, as many SLURM recipes do."""

import argparse
import json
import os
import socket
from pathlib import Path

import torch
import torch.distributed as dist
from mpi4py import MPI  # initializes MPI, as mpi4py-based cluster detection does

parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float, required=True)
parser.add_argument("--out", type=Path, required=True)
args = parser.parse_args()

TORCHRUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
            "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "TORCHELASTIC_RUN_ID",
            "TORCHELASTIC_USE_AGENT_STORE")
seen = {
    "torchrun": {name: os.environ.get(name) for name in TORCHRUN},
    "torchelastic_launched": dist.is_torchelastic_launched(),
    "launcher": sorted(n for n in os.environ if n.startswith(("PMIX_", "PMI_", "OMPI_COMM_WORLD"))),
    "ompi_mca": sorted(n for n in os.environ if n.startswith("OMPI_MCA_")),
    "slurm_job": os.environ.get("SLURM_JOB_ID"),
    "slurm_task": {name: value for name, value in os.environ.items()
                   if name.startswith(("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
                                       "SLURM_GTIDS", "SLURM_NTASKS", "SLURM_NPROCS",
                                       "SLURM_NNODES", "SLURM_TASKS_PER_NODE", "SLURM_STEP_"))},
    "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "mpi_world": [MPI.COMM_WORLD.Get_size(), MPI.COMM_WORLD.Get_rank()],
}
probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
try:  # another program taking the store's port before rank 0's store listens on it
    probe.bind(("", int(os.environ["MASTER_PORT"])))
    seen["port_taken_by_others"] = True
except OSError:
    seen["port_taken_by_others"] = False
probe.close()
if "SLURM_PROCID" in os.environ:  # rank and world as a SLURM recipe reads them
    dist.init_process_group("gloo", rank=int(os.environ["SLURM_PROCID"]),
                            world_size=int(os.environ["SLURM_NTASKS"]))
else:
    dist.init_process_group("gloo")
total = torch.tensor([1.0])
dist.all_reduce(total)
seen["gloo_world"] = [dist.get_world_size(), int(total.item())]
(args.out / f"rank{dist.get_rank()}.json").write_text(json.dumps(seen))
if dist.get_rank() == 0:
    print(f"ATOLL result={args.x}", flush=True)
dist.destroy_process_group()
