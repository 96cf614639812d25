"""A worker for the node-health and NUMA tests (no torch.distributed: nothing to time out).

Prints its CPU affinity (`affinity rank=R cpus=0,1`), writes `<dir>/running.<local rank>`
once it runs, then waits until `<dir>/release` exists (the test decides when it ends;
the launcher may stop it first) and exits 0. Without --dir it exits at once.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", default="")
    a = p.parse_args()
    rank = os.environ.get("LOCAL_RANK", "0")
    cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    print(f"affinity rank={rank} cpus={cpus}", flush=True)
    if not a.dir:
        return 0
    d = Path(a.dir)
    (d / f"running.{rank}").write_text(str(os.getpid()))
    while not (d / "release").exists():
        time.sleep(0.05)  # polling a file the test writes; the test never waits on time
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
