"""A plain training script (no Atoll import): argparse options in, ATOLL lines out."""

import argparse
import os
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--layers", type=int, required=True)
parser.add_argument("--out", type=Path, required=True)
parser.add_argument("--no-result", action="store_true")
args = parser.parse_args()

args.out.joinpath("seen.txt").write_text(
    f"{args.lr} {args.layers} {os.environ['RANK']} {os.environ['WORLD_SIZE']} "
    f"{os.environ['MASTER_ADDR']} {os.environ['GREETING']}\n")
loss = (args.lr - 0.3) ** 2 + args.layers
for epoch in range(3):
    print(f"training epoch {epoch}")  # the script's own output goes to the log only
    print(f"ATOLL epoch={epoch} val_loss={loss + 2 - epoch}", flush=True)  # ends at loss
if not args.no_result:
    print(f"ATOLL result={loss + 1}")
