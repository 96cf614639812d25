"""One launcher per single-node job directory on a host.

Two `relaunch run` with the same `--job-id` and `--log-dir` on one host (a job submitted
twice, a retry started while the old launcher still runs) would append to the same cycle
logs and number their cycles from the same files: the job's history mixed or lost. A
single-node launcher therefore holds an exclusive `flock` on
`<log-dir>/<job-id>/.launcher.lock` for as long as it runs; the kernel releases it when
the process ends, however it ends (SIGKILL too), so a stale lock never blocks a re-run.
A second launcher finds it held and stops before starting anything (exit 2), naming the
first one's pid. Multi-node jobs are not locked here: several of their launchers may share
a host and a log directory, each writing its own `cycle_<N>.node<K>.log`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK_NAME = ".launcher.lock"


class JobLocked(Exception):
    """Another live launcher holds the job directory."""


def acquire(job_dir: Path) -> int:
    """Lock `job_dir` for this process; the lock's file descriptor (keep it open).
    Raises JobLocked when another process holds it, OSError when it cannot be made."""
    path = job_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise JobLocked(
            f"job directory {job_dir} is in use by another relaunch run on this host "
            f"(pid {holder}): give this run another --job-id or --log-dir, or wait for it "
            "to end"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def release(fd: int) -> None:
    """Give the lock up (closing the descriptor releases the flock)."""
    with contextlib.suppress(OSError):
        os.close(fd)
