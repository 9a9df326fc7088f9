"""Scripts that fail: --crash, --hang (past search.eval_timeout), --silent (no result),
--crash-rank1 (rank 1 crashes, the other ranks wait for it as DDP partners would)."""

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
print("done, but no result line")
