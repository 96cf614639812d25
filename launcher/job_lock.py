"""One launcher per single-node job directory on a host.

Two `relaunch run` with the same `--job-id` and `--log-dir` on one host (a job submitted
twice, a retry started while the old launcher still runs) would append to the same cycle
logs and number their cycles from the same files: the job's history mixed or lost. A
single-node launcher therefore holds an exclusive `flock` for as long as it runs; the
kernel releases it when the process ends, however it ends (SIGKILL too), so a stale lock
never blocks a re-run. A second launcher finds it held and stops before starting anything
(exit 2), naming the first one's pid.

The lock file is host-local, never in the (often shared) log directory: on NFS or Lustre
`flock` is either cluster-wide (a requeue on another node would find a crashed node's
lock still held) or not supported at all. It lives in a directory private to the user
(`$XDG_RUNTIME_DIR/relaunch-jobs`, else `<tmp>/relaunch-<uid>/jobs`, mode 0700, refused
unless it is a real directory owned by the user), named by a hash of the job directory's
real path. Where no such lock can be had (the directory is unusable, the file system
refuses locks) the run goes on unlocked with a warning: a lock must never stop a job that
could run. Multi-node jobs are not locked here: several of their launchers may share a
host and a log directory, each writing its own `cycle_<N>.node<K>.log`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
import tempfile
from pathlib import Path


class JobLocked(Exception):
    """Another live launcher on this host holds the job directory."""


def lock_dir() -> Path:
    """The user's private directory for job locks."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return Path(runtime) / "relaunch-jobs"
    return Path(tempfile.gettempdir()) / f"relaunch-{os.getuid()}" / "jobs"


def _private_dir(path: Path) -> None:
    """Create `path` (and a private parent under tmp) mode 0700; raise OSError unless each
    is a real directory owned by this user that others cannot write."""
    for d in (path.parent, path) if path.parent.name.startswith("relaunch-") else (path,):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, 0o700)
        st = os.lstat(d)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
            raise OSError(errno.EPERM, f"{d} is not a private directory of this user")


def acquire(job_dir: Path) -> tuple[int | None, str | None]:
    """Lock `job_dir` on this host for this process: (the lock's file descriptor, to keep
    open, or None; a warning when the run goes on unlocked). Raises JobLocked when another
    live process holds it."""
    real = os.path.realpath(job_dir)
    name = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:32] + ".lock"
    try:
        d = lock_dir()
        _private_dir(d)
        fd = os.open(d / name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        return None, f"job lock unavailable ({exc}); this run is not locked against a second one"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise JobLocked(
            f"job directory {real} is in use by another relaunch run on this host "
            f"(pid {holder}): give this run another --job-id or --log-dir, or wait for it "
            "to end"
        ) from None
    except OSError as exc:  # the file system refuses locks (ENOLCK, ENOSYS, EOPNOTSUPP...)
        os.close(fd)
        return None, f"job lock unavailable ({exc}); this run is not locked against a second one"
    with contextlib.suppress(OSError):  # the pid is for the message only
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd, None


def release(fd: int | None) -> None:
    """Give the lock up (closing the descriptor releases the flock)."""
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
