"""The one file-safety path: open and read files others may have put in place.

Used by the service and MCP (client-named logs under `--allowed-root`), the log funnel,
audit artifacts, the Flight Recorder reader and secret files; it lives in the lowest
package so that every package may import it (docs/ARCHITECTURE.md). The rules, the same
everywhere (docs/service.md, "Paths"):

- `open_confined(path, roots)`: `path` must lie lexically under a root; the walk starts at
  that root and opens one component at a time with `O_NOFOLLOW` relative to its parent
  (an `openat` walk), so no symlink is followed below the root, whether it points inside
  or outside (a symlink anywhere below the root is refused), and a directory swapped for a
  symlink between the check and the read cannot redirect it. The root itself is the
  operator's and may be a symlink.
- `open_regular(path)`: the file opened without blocking (`O_NONBLOCK`: a FIFO in its
  place cannot hang the open) and accepted only when `fstat` says regular file: FIFOs,
  devices, sockets and directories are refused. `follow=False` refuses a symlink too.
- `read_bounded(fd_or_path, limit)`: refuses before reading when `fstat` says the file is
  over `limit` bytes, then reads at most `limit` + 1 bytes, so a file that grows while read
  is refused too, never read without end.

Errors are typed (`FileSafetyError` subclasses, all `OSError`s so existing handlers keep
working): `OutsideRoot`, `SymlinkRefused`, `NotRegularFile`, `TooLarge`; a missing file
is `FileNotFoundError`, an unreadable one `PermissionError`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20


class FileSafetyError(OSError):
    """A file refused by the file-safety rules (the message says which and why)."""


class OutsideRoot(FileSafetyError):
    """The path is not under any allowed root (lexically)."""


class SymlinkRefused(FileSafetyError):
    """A component below the root is a symlink (or not a directory)."""


class NotRegularFile(FileSafetyError):
    """The path names a FIFO, a device, a socket or a directory."""


class TooLarge(FileSafetyError):
    """The file is larger than the caller's limit (refused before reading)."""


def _err(cls: type[FileSafetyError], code: int, message: str, path: str) -> FileSafetyError:
    return cls(code, message, path)


def split_under_root(path: str, roots: Sequence[str | os.PathLike[str]]) -> tuple[str, list[str]]:
    """The root that lexically contains the absolute `path` (the deepest one) and the
    components below it. OutsideRoot when none does; ValueError for a relative path or NUL."""
    if not os.path.isabs(path) or "\x00" in path:
        raise ValueError(f"not an absolute path: {path!r}")
    lexical = os.path.normpath(path)
    best: tuple[str, list[str]] | None = None
    for root in roots:
        r = os.fspath(root)
        rel = os.path.relpath(lexical, r)
        if rel in (".", "..") or rel.startswith(".." + os.sep):
            continue
        parts = rel.split(os.sep)
        if best is None or len(parts) < len(best[1]):
            best = (r, parts)
    if best is None:
        raise _err(OutsideRoot, errno.EACCES, "outside the allowed roots", path)
    return best


def _check_regular(fd: int, path: str) -> os.stat_result:
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", path)
    if not stat.S_ISREG(st.st_mode):
        raise _err(NotRegularFile, errno.EINVAL, "not a regular file", path)
    return st


def _walk_error(exc: OSError, path: str) -> OSError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        return _err(SymlinkRefused, exc.errno, "a component is a symlink or not a directory", path)
    return exc


def open_confined(
    path: str | os.PathLike[str],
    roots: Sequence[str | os.PathLike[str]],
    *,
    write: bool = False,
) -> int:
    """A descriptor of the regular file `path` under one of `roots`, reached by an openat
    walk that follows no symlink below the root. `write=True` opens for appending and
    creates the file and its missing directories (the log funnel). The caller closes it."""
    raw = os.fspath(path)
    root, parts = split_under_root(raw, roots)
    fd = os.open(root, _DIR_FLAGS & ~os.O_NOFOLLOW)  # the root itself is the operator's
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not write:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        if write:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
            leaf = os.open(parts[-1], flags | os.O_CLOEXEC, 0o644, dir_fd=fd)
        else:
            leaf = os.open(parts[-1], _READ_FLAGS, dir_fd=fd)
    except OSError as exc:
        raise _walk_error(exc, raw) from None
    finally:
        os.close(fd)
    try:
        _check_regular(leaf, raw)
        os.set_blocking(leaf, True)
    except BaseException:
        os.close(leaf)
        raise
    return leaf


def open_regular(path: str | os.PathLike[str], *, follow: bool = True) -> int:
    """A read-only descriptor of the regular file `path`, opened without blocking;
    `follow=False` refuses a symlink at the last component. The caller closes it."""
    raw = os.fspath(path)
    flags = _READ_FLAGS if not follow else _READ_FLAGS & ~os.O_NOFOLLOW
    try:
        fd = os.open(raw, flags)
    except OSError as exc:
        raise _walk_error(exc, raw) from None
    try:
        _check_regular(fd, raw)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_fd_bounded(fd: int, limit: int, name: str = "file") -> bytes:
    """At most `limit` bytes of the open regular file `fd`; TooLarge (before reading) when
    `fstat` says more, or when it grows past `limit` while being read."""
    size = os.fstat(fd).st_size
    if size > limit:
        raise _err(TooLarge, errno.EFBIG, f"larger than {limit} bytes ({size})", name)
    parts: list[bytes] = []
    total = 0
    while total <= limit:
        chunk = os.read(fd, min(_CHUNK, limit + 1 - total))
        if not chunk:
            break
        parts.append(chunk)
        total += len(chunk)
    if total > limit:
        raise _err(TooLarge, errno.EFBIG, f"grew past {limit} bytes while read", name)
    return b"".join(parts)


def read_bounded(path: str | os.PathLike[str], limit: int, *, follow: bool = True) -> bytes:
    """The bytes of the regular file `path`, refused (TooLarge) before reading when it is
    over `limit` bytes; FIFOs, devices and directories refused (NotRegularFile)."""
    fd = open_regular(path, follow=follow)
    try:
        return read_fd_bounded(fd, limit, os.fspath(path))
    finally:
        os.close(fd)


def read_confined(
    path: str | os.PathLike[str], roots: Sequence[str | os.PathLike[str]], limit: int
) -> bytes:
    """`read_bounded` of a file reached through `open_confined`."""
    fd = open_confined(path, roots)
    try:
        return read_fd_bounded(fd, limit, os.fspath(path))
    finally:
        os.close(fd)


def real_roots(roots: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The roots as the operator named them, resolved once (a root may be a symlink)."""
    return [Path(os.path.realpath(os.fspath(r))) for r in roots]
