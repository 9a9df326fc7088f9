"""A long training script: reports an epoch every 0.1 s (with --one-line: one epoch, then a
long silence); on SIGTERM it notes it in its work directory and exits, or with --stubborn
ignores it. With --no-flush it prints as most scripts do, without flushing."""

import os
import signal
import sys
import time
from pathlib import Path


def note_and_exit(signum, frame):
    Path(sys.argv[1], "terminated").write_text("SIGTERM")
    sys.exit(0)


signal.signal(signal.SIGTERM, signal.SIG_IGN if "--stubborn" in sys.argv else note_and_exit)
Path(sys.argv[1], "pid").write_text(str(os.getpid()))
for epoch in range(600):
    print(f"ATOLL epoch={epoch} val_loss={1.0 / (epoch + 1)}", flush="--no-flush" not in sys.argv)
    time.sleep(600 if "--one-line" in sys.argv else 0.1)
print("ATOLL result=0.0")
