"""The one file-safety path: open and read files others may have put in place.

Used by the service and MCP (client-named logs under `--allowed-root`), the log funnel,
audit artifacts, the Flight Recorder reader and secret files; it lives in the lowest
package so that every package may import it (docs/ARCHITECTURE.md). The rules, the same
everywhere (docs/service.md, "Paths: the symlink rule"):

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

- `check_path(raw)`: the lexical rules for a path a client names (absolute, no `..`, no
  NUL, bounded length), checked before anything is opened.

Errors are typed (`FileSafetyError` subclasses, all `OSError`s so existing handlers keep
working): `InvalidPath`, `OutsideRoot`, `SymlinkRefused`, `NotRegularFile`, `TooLarge`;
a missing file is `FileNotFoundError`, an unreadable one `PermissionError`, a directory
where a file is wanted `IsADirectoryError`. Each adapter maps them to its own one-line
refusal (HTTP status, MCP tool error, gRPC status, `DumpError`, CLI error).
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


class InvalidPath(FileSafetyError):
    """A path refused before any file is touched: empty, too long, NUL, relative, `..`."""


MAX_PATH_LEN = 4096


def check_path(raw: object, max_len: int = MAX_PATH_LEN) -> str:
    """`raw` normalised, when it may name a file under a root at all: a non-empty absolute
    path of at most `max_len` characters, no NUL byte, no `..` component. InvalidPath
    (the message completes "path ...") otherwise. Nothing is opened."""
    if not isinstance(raw, str) or not raw:
        raise _err(InvalidPath, errno.EINVAL, "must be a non-empty string", repr(raw))
    if len(raw) > max_len or "\x00" in raw:
        raise _err(InvalidPath, errno.EINVAL, "is too long or contains a NUL byte", raw[:80])
    if not os.path.isabs(raw):
        raise _err(InvalidPath, errno.EINVAL, f"must be absolute: {raw!r}", raw)
    if ".." in Path(raw).parts:
        raise _err(InvalidPath, errno.EINVAL, f"must not contain '..': {raw!r}", raw)
    return os.path.normpath(raw)


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


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def _check_regular(fd: int, path: str) -> os.stat_result:
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", path)
    if not stat.S_ISREG(st.st_mode):
        raise _err(NotRegularFile, errno.EINVAL, f"not a regular file ({_kind(st.st_mode)})", path)
    return st


def _regular_or_close(fd: int, path: str) -> int:
    """`fd` when it is a regular file, switched back to blocking reads; closed otherwise."""
    try:
        _check_regular(fd, path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _walk_error(exc: OSError, path: str) -> OSError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        return _err(SymlinkRefused, exc.errno, "a component is a symlink or not a directory", path)
    if exc.errno == errno.ENXIO:  # opened for writing without blocking: a FIFO or device
        return _err(NotRegularFile, exc.errno, "not a regular file (a FIFO or device)", path)
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
    return _regular_or_close(leaf, raw)


def open_confined_dir(path: str | os.PathLike[str], roots: Sequence[str | os.PathLike[str]]) -> int:
    """A descriptor of the directory `path` under one of `roots` (the root itself
    included), reached by the same walk as `open_confined`. The caller closes it."""
    raw = os.fspath(path)
    if not os.path.isabs(raw) or "\x00" in raw:
        raise ValueError(f"not an absolute path: {raw!r}")
    lexical = os.path.normpath(raw)
    roots_s = [os.fspath(r) for r in roots]
    if lexical in roots_s:
        return os.open(lexical, _DIR_FLAGS & ~os.O_NOFOLLOW)
    root, parts = split_under_root(lexical, roots_s)
    fd = os.open(root, _DIR_FLAGS & ~os.O_NOFOLLOW)
    try:
        for part in parts:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError as exc:
        os.close(fd)
        raise _walk_error(exc, raw) from None
    return fd


def open_regular(path: str | os.PathLike[str], *, follow: bool = True) -> int:
    """A read-only descriptor of the regular file `path`, opened without blocking;
    `follow=False` refuses a symlink at the last component. The caller closes it."""
    raw = os.fspath(path)
    flags = _READ_FLAGS if not follow else _READ_FLAGS & ~os.O_NOFOLLOW
    try:
        fd = os.open(raw, flags)
    except OSError as exc:
        raise _walk_error(exc, raw) from None
    return _regular_or_close(fd, raw)


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
