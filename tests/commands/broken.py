"""Scripts that fail: --crash, --hang (past search.eval_timeout), --silent (no result)."""

import sys
import time

mode = sys.argv[1]
print(f"starting {mode}", file=sys.stderr, flush=True)
if mode == "--crash":
    raise RuntimeError("the model diverged")
if mode == "--hang":
    time.sleep(600)
print("done, but no result line")
