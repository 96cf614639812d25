"""`python -m launcher.numa_exec COMMAND [ARGS...]`: bind, then become the worker.

Sets this process's CPU affinity to the CPUs `RELAUNCH_NUMA_PLAN` gives its `LOCAL_RANK`
(see `launcher.numa`) and execs COMMAND, so the workload starts on those CPUs. A plan that
cannot be applied ends the worker with exit code 1 and a one-line reason.
"""

from __future__ import annotations

import os
import sys

from relaunch.launcher.numa import ENV_PLAN, cpus_for_local_rank


def main(argv: list[str]) -> int:
    if not argv:
        print("relaunch.launcher.numa_exec: no command to run", file=sys.stderr)
        return 2
    try:
        cpus = cpus_for_local_rank()
        os.sched_setaffinity(0, cpus)
    except (KeyError, ValueError, OSError) as exc:
        print(f"relaunch.launcher.numa_exec: cannot bind from {ENV_PLAN}: {exc}", file=sys.stderr)
        return 1
    os.execvp(argv[0], argv)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
