"""Open client-named files without leaving the allowed roots, whatever happens on disk.

`confine()` (paths.py) checks a path when a client names it; the file is read later
(terminal analysis, a node-health report or FR upload that re-decides the cycle), and by
then a directory on the path may have been swapped for a symlink to somewhere else.
`open_confined` therefore re-checks at every read, on the file descriptors themselves:

- it walks from the root that lexically contains the path, one component at a time,
  `os.open(component, O_DIRECTORY | O_NOFOLLOW, dir_fd=parent)` (an `openat` walk), so
  no symlink is followed at any level and `..` never appears;
- it opens the last component with `O_NOFOLLOW | O_NONBLOCK` (a FIFO swapped in cannot
  block the open) and `fstat`s the descriptor: a regular file or nothing.

The caller reads from the returned descriptor. Errors are `ApiError`s: 403
`outside_allowed_root` (no root contains the path, or a component is a symlink), 404
`not_found`, 400 `not_regular_file`, 403 `unreadable`.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from relaunch.attribution.service.errors import ApiError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _split(path: str, roots: Sequence[Path]) -> tuple[Path, list[str]]:
    """The root containing `path` lexically (the longest) and the components below it."""
    if not os.path.isabs(path) or "\x00" in path:
        raise ApiError("invalid_path", f"not an absolute path: {path!r}")
    lexical = os.path.normpath(path)
    best: tuple[Path, list[str]] | None = None
    for root in roots:
        rel = os.path.relpath(lexical, root)
        if rel == "." or rel == ".." or rel.startswith(".." + os.sep):
            continue
        parts = rel.split(os.sep)
        if best is None or len(parts) < len(best[1]):
            best = (root, parts)
    if best is None:
        raise ApiError("outside_allowed_root", f"path is outside the allowed roots: {path!r}")
    return best


def _error(exc: OSError, path: str) -> ApiError:
    if exc.errno == errno.ENOENT:
        return ApiError("not_found", f"log file not found: {path!r}")
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        return ApiError(
            "outside_allowed_root",
            f"a component of the path is a symlink or not a directory: {path!r}",
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return ApiError("unreadable", f"log file is not readable: {path!r}")
    return ApiError("invalid_path", f"cannot open {path!r}: {exc.strerror}")


def open_confined(path: str | os.PathLike[str], roots: Sequence[Path]) -> int:
    """A read-only descriptor of the regular file `path`, reached from a root without
    following any symlink. The caller closes it."""
    raw = os.fspath(path)
    root, parts = _split(raw, roots)
    try:
        fd = os.open(root, _DIR_FLAGS & ~os.O_NOFOLLOW)  # the root itself is the operator's
    except OSError as exc:
        raise _error(exc, raw) from None
    try:
        for part in parts[:-1]:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        leaf = os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
    except OSError as exc:
        raise _error(exc, raw) from None
    finally:
        os.close(fd)
    try:
        st = os.fstat(leaf)
        if not stat.S_ISREG(st.st_mode):
            raise ApiError("not_regular_file", f"not a regular file: {raw!r}")
        os.set_blocking(leaf, True)
    except BaseException:
        os.close(leaf)
        raise
    return leaf


@contextmanager
def confined_file(path: str | os.PathLike[str], roots: Sequence[Path]) -> Iterator[BinaryIO]:
    """`with confined_file(p, roots) as fh:` an unbuffered binary file read through
    `open_confined`."""
    fd = open_confined(path, roots)
    with os.fdopen(fd, "rb", buffering=0) as fh:
        yield fh


def is_confined_file(path: str | os.PathLike[str], roots: Sequence[Path]) -> bool:
    """True when `open_confined` would succeed right now."""
    try:
        os.close(open_confined(path, roots))
    except ApiError:
        return False
    return True
