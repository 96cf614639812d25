"""Open client-named files without leaving the allowed roots, whatever happens on disk.

`confine()` (paths.py) checks a path when a client names it; the file is read later
(terminal analysis, a node-health report or FR upload that re-decides the cycle), and by
then a directory on the path may have been swapped for a symlink to somewhere else.
`open_confined` therefore re-checks at every read, on the file descriptors themselves,
through the one file-safety path (`restart_agent.safe_files`, shared with MCP, FR, audit,
the funnel and secret files):

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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from relaunch.attribution.service.errors import ApiError
from relaunch.restart_agent import safe_files


def _error(exc: OSError, path: str) -> ApiError:
    if isinstance(exc, safe_files.OutsideRoot):
        return ApiError("outside_allowed_root", f"path is outside the allowed roots: {path!r}")
    if isinstance(exc, safe_files.SymlinkRefused):
        return ApiError(
            "outside_allowed_root",
            f"a component of the path is a symlink or not a directory: {path!r}",
        )
    if isinstance(exc, (safe_files.NotRegularFile, IsADirectoryError)):
        return ApiError("not_regular_file", f"not a regular file: {path!r}")
    if exc.errno == errno.ENOENT:
        return ApiError("not_found", f"log file not found: {path!r}")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return ApiError("unreadable", f"log file is not readable: {path!r}")
    return ApiError("invalid_path", f"cannot open {path!r}: {exc.strerror}")


def open_confined(path: str | os.PathLike[str], roots: Sequence[Path]) -> int:
    """A read-only descriptor of the regular file `path`, reached from a root without
    following any symlink (`restart_agent.safe_files.open_confined`). The caller closes it."""
    raw = os.fspath(path)
    try:
        return safe_files.open_confined(raw, roots)
    except ValueError:
        raise ApiError("invalid_path", f"not an absolute path: {raw!r}") from None
    except OSError as exc:
        raise _error(exc, raw) from None


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
