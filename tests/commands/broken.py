"""Scripts that fail: --crash, --hang (past search.eval_timeout), --silent (no result),
--crash-rank1 (rank 1 crashes, the other ranks wait for it as DDP partners would), and
scripts that abort on their way out, after rank 0 said its result, as torch's gloo teardown
now and then does: --abort-leader (rank 0 aborts after its result line), --abort-rank1-first
(rank 1 aborts, then rank 0 says its result and exits 0), --abort-rank1-leader-lingers (rank 1
aborts, rank 0 says its result and goes on running, as in a barrier with the lost partner);
--rank1-lingers (rank 0 says its result and exits 0, rank 1 runs on, as in a barrier the
leader left), --long-stderr (a failure whose stderr is one line of 100,000 characters)."""

import os
import sys
import time
from pathlib import Path

mode = sys.argv[1]
print(f"starting {mode}", file=sys.stderr, flush=True)
if mode == "--crash":
    raise RuntimeError("the model diverged")
if mode == "--hang":
    time.sleep(600)
if mode == "--crash-rank1":
    pid = Path(sys.argv[2], "pid")
    if os.environ["RANK"] == "1":
        while not pid.exists():  # crash once rank 0 runs
            time.sleep(0.01)
        sys.exit(3)
    mine = pid.with_suffix(f".tmp{os.environ['RANK']}")  # each waiting rank writes its own
    mine.write_text(str(os.getpid()))
    mine.rename(pid)
    time.sleep(600)
if mode == "--abort-leader":
    if os.environ["RANK"] == "0":
        print("ATOLL result=0.25", flush=True)
        os.abort()
    sys.exit(0)
if mode in ("--abort-rank1-first", "--abort-rank1-leader-lingers"):
    gone = Path(sys.argv[2], "rank1-aborting")
    if os.environ["RANK"] == "1":
        gone.write_text("")
        os.abort()
    while not gone.exists():
        time.sleep(0.01)
    time.sleep(0.5)  # the worker sees rank 1's end several ticks before the result
    print("ATOLL result=0.5", flush=True)
    if mode == "--abort-rank1-leader-lingers":
        time.sleep(600)
    sys.exit(0)
if mode == "--rank1-lingers":
    if os.environ["RANK"] == "0":
        print("ATOLL result=0.75", flush=True)
        sys.exit(0)
    time.sleep(600)
if mode == "--long-stderr":
    print("x" * 100_000, file=sys.stderr, flush=True)
    sys.exit(1)
print("done, but no result line")
