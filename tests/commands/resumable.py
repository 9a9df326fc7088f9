"""A training script that keeps its own checkpoint (plain JSON, written whole) where Atoll says
(ATOLL_CHECKPOINT_DIR) and continues from ATOLL_RESUME_DIR when that is set. It finishes the
epoch it is in when SIGTERM comes, and notes each epoch it ran in its work directory. With
--no-epochs it prints its result line only."""

import argparse
import json
import os
import signal
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float, required=True)
parser.add_argument("--epochs", type=int, default=8)
parser.add_argument("--out", type=Path, required=True)
parser.add_argument("--resume", default="")  # the {resume_dir} placeholder: "" or the directory
parser.add_argument("--no-epochs", action="store_true")
args = parser.parse_args()
assert args.resume == os.environ["ATOLL_RESUME_DIR"]

stopping = []
signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
saves = Path(os.environ["ATOLL_CHECKPOINT_DIR"])
state = {"epoch": -1, "loss": 10.0}
if args.resume:
    state = json.loads(Path(args.resume, "state.json").read_text())
Path(args.out, "pid").write_text(str(os.getpid()))
for epoch in range(state["epoch"] + 1, args.epochs):
    if stopping:
        break
    time.sleep(0.15)  # one epoch of training
    state = {"epoch": epoch, "loss": state["loss"] * 0.5 + args.x}
    saves.joinpath("state.json.tmp").write_text(json.dumps(state))
    saves.joinpath("state.json.tmp").rename(saves / "state.json")
    with Path(args.out, "epochs.txt").open("a") as trace:
        trace.write(f"{epoch}\n")
    if not args.no_epochs:
        print(f"ATOLL epoch={epoch} val_loss={state['loss']}", flush=True)
else:
    print(f"ATOLL result={state['loss']}", flush=True)
