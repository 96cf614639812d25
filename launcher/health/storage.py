"""Storage check: a configured directory is writable and answers within a bound.

One probe writes a small file in the directory, fsyncs it, reads it back, compares and
removes it. It runs in a daemon thread: a hung filesystem (a stuck NFS/Lustre mount) makes
the check fail after `timeout_s` instead of hanging the launcher; the stuck thread is left
behind and the next probe is not started while it is still stuck.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import threading
from pathlib import Path

from relaunch.launcher.health.report import CheckResult

CHECK_NAME = "storage"
DEFAULT_TIMEOUT_S = 10.0


def probe_name() -> str:
    return f".relaunch-storage-probe.{socket.gethostname()}.{os.getpid()}"


def _open_own(target: Path) -> int:
    """Open the probe file for writing, never through something planted at its name in a
    shared directory: a symlink (O_NOFOLLOW) or a hard link to someone's file is removed
    and the file created afresh (O_EXCL); only then is it truncated. A FIFO there blocks
    the open, as a write on a hung mount does (the caller's bound applies)."""
    base = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(target, base, 0o600)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        fd = -1
    if fd >= 0:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
            os.ftruncate(fd, 0)
            return fd
        os.close(fd)
    os.unlink(target)  # a symlink, or a link to a file that is not ours
    return os.open(target, base | os.O_EXCL, 0o600)


def _probe(path: Path, name: str) -> None:
    """Write + fsync + read back + remove; raises OSError or ValueError."""
    target = path / name
    payload = f"relaunch storage probe {os.getpid()}\n".encode()
    fd = _open_own(target)
    try:
        os.write(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)
    fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        back = fh.read(len(payload) + 1)
    os.unlink(target)
    if back != payload:
        raise ValueError(f"read back {len(back)} byte(s) that differ from what was written")


class StorageCheck:
    """Probe `path` (a directory) each call; fail on an error or no answer in `timeout_s`."""

    def __init__(
        self, path: str | os.PathLike[str], *, timeout_s: float = DEFAULT_TIMEOUT_S,
        name: str | None = None,
    ) -> None:  # fmt: skip
        if timeout_s <= 0:
            raise ValueError("storage check timeout must be > 0 seconds")
        self.path = Path(path)
        self.timeout_s = timeout_s
        self.name = name or probe_name()
        self._stuck: threading.Thread | None = None

    def __call__(self) -> list[CheckResult]:
        data = {"path": str(self.path), "timeout_s": self.timeout_s}
        if self._stuck is not None and self._stuck.is_alive():
            msg = f"{self.path}: an earlier probe is still stuck"
            return [CheckResult(CHECK_NAME, "fail", msg, data)]
        outcome: list[BaseException | None] = []

        def run() -> None:
            try:
                _probe(self.path, self.name)
            except BaseException as exc:  # noqa: BLE001 - reported to the caller
                outcome.append(exc)
            else:
                outcome.append(None)

        thread = threading.Thread(target=run, name="relaunch-storage-probe", daemon=True)
        thread.start()
        thread.join(self.timeout_s)
        if thread.is_alive():
            self._stuck = thread
            msg = f"{self.path}: write+fsync+read did not answer within {self.timeout_s:g} s"
            return [CheckResult(CHECK_NAME, "fail", msg, data)]
        err = outcome[0] if outcome else None
        if err is not None:
            msg = f"{self.path}: {type(err).__name__}: {err}"
            return [CheckResult(CHECK_NAME, "fail", msg, data)]
        return [CheckResult(CHECK_NAME, "ok", f"{self.path} writable", data)]
