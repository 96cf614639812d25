"""Worker of the rendezvous-store attack test: in cycle 0 it writes UP_FILE and waits for
GO_FILE (the test attacks the store meanwhile), then every cycle exits 7 (a failure)."""

import os
import sys
import time

if os.environ.get("RELAUNCH_CYCLE", "0") == "0":
    with open(os.environ["UP_FILE"] + ".tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(os.environ["UP_FILE"] + ".tmp", os.environ["UP_FILE"])
    deadline = time.monotonic() + 240
    while not os.path.exists(os.environ["GO_FILE"]) and time.monotonic() < deadline:
        time.sleep(0.05)
sys.exit(7)
