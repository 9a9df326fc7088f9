"""A training script that keeps its state (plain JSON, written whole) in ATOLL_CHECKPOINT_DIR and
starts from ATOLL_RESUME_DIR when that is set: its own run's, or a parent's when
ATOLL_INHERIT_FROM names one. It trains --epochs more epochs from there and notes, per rank,
what it loaded in its work directory. With --forget it empties its checkpoint directory as it
ends. No Atoll import."""

import argparse
import json
import os
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float, required=True)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--out", type=Path, required=True)
parser.add_argument("--forget", action="store_true")
args = parser.parse_args()

rank = int(os.environ["RANK"])
resume = os.environ["ATOLL_RESUME_DIR"]
state = {"epoch": -1, "w": 0.0, "trained_by": []}
if resume:
    state = json.loads(Path(resume, "state.json").read_text())
args.out.joinpath(f"loaded-rank{rank}.json").write_text(json.dumps({
    "resume": resume, "inherit_from": os.environ["ATOLL_INHERIT_FROM"],
    "inherit_epoch": os.environ["ATOLL_INHERIT_EPOCH"], "state": state}))
saves = Path(os.environ["ATOLL_CHECKPOINT_DIR"])
for epoch in range(state["epoch"] + 1, state["epoch"] + 1 + args.epochs):
    time.sleep(0.05)  # one epoch of training
    state = {"epoch": epoch, "w": state["w"] * 0.5 + args.x,
             "trained_by": [*state["trained_by"], args.out.name]}
    if rank == 0:
        saves.joinpath("state.json.tmp").write_text(json.dumps(state))
        saves.joinpath("state.json.tmp").rename(saves / "state.json")
        print(f"ATOLL epoch={epoch} val_loss={state['w']}", flush=True)
if rank == 0:
    args.out.joinpath("final.json").write_text(json.dumps(state))
    if args.forget:
        saves.joinpath("state.json").unlink()
    print(f"ATOLL result={state['w']}", flush=True)
