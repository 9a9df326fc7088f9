"""A script whose results go to ATOLL_RESULTS_FILE (objective.results = "file"): its epochs
through atoll.report_line, its result written by hand in two parts. Its stdout holds a line
that looks like a result, and rank 1's file a bad line: neither may count."""

import os
import sys
import time

from atoll.report_line import report

x = float(sys.argv[1])
print("ATOLL result=999", flush=True)  # stdout is the script's own in this mode
if os.environ["RANK"] != "0":
    report(0, val_loss=-1.0)
    with open(os.environ["ATOLL_RESULTS_FILE"], "a") as out:
        out.write("ATOLL not a line Atoll reads\n")
    sys.exit(0)
for epoch in range(3):
    report(epoch, val_loss=x + 3 - epoch)
with open(os.environ["ATOLL_RESULTS_FILE"], "a") as out:
    out.write("ATOLL resu")  # a partial line waits for its end
    out.flush()
    time.sleep(0.3)
    out.write(f"lt={x}\n")
