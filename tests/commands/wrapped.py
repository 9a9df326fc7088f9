"""A script started by a shell wrapper (``sh -c '... & wait'``): it notes its pid in its work
directory and sleeps, silent; with --own-session it first leaves the wrapper's process group and
session, as a torchrun-like launcher's workers do."""

import os
import sys
import time
from pathlib import Path

if "--own-session" in sys.argv:
    os.setsid()
Path(sys.argv[1], f"grandchild-{os.getpid()}").write_text(str(os.getpgrp()))
time.sleep(600)
