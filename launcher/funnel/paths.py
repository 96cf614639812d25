"""Confinement of client-chosen log paths to the writer's root directory.

A funnel client names the file it writes as a path relative to the writer's root (derived
by the launcher, e.g. `<log-dir>/<job-id>`). `confine` rejects empty paths, NUL bytes,
`..` components and absolute paths outside the root; `open_confined` opens through the
one file-safety walk (`restart_agent.safe_files`), which refuses any symlink below the
root (inside or outside), FIFOs and other non-files, and creates missing directories
inside the walk, so nothing can be swapped between a check and the open.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from relaunch.restart_agent import safe_files

MAX_PATH_CHARS = 1024


class PathRejected(Exception):
    """A client path the writer refuses. `kind` maps to a gRPC status code."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # "invalid" | "escape" | "os"
        self.message = message


def confine(root: Path, relpath: str) -> PurePosixPath:
    """Validate `relpath` lexically; return it as a path relative to `root`."""
    if not relpath:
        raise PathRejected("invalid", "log path is empty")
    if "\x00" in relpath:
        raise PathRejected("invalid", f"log path {relpath!r} contains a NUL byte")
    if len(relpath) > MAX_PATH_CHARS:
        raise PathRejected("invalid", f"log path is longer than {MAX_PATH_CHARS} characters")
    pure = PurePosixPath(relpath)
    if ".." in pure.parts:
        raise PathRejected(
            "invalid", f"log path {relpath!r} contains '..' (traversal is not allowed)"
        )
    if pure.is_absolute():
        root_real = os.path.realpath(root)
        try:
            _, below = safe_files.split_under_root(relpath, [root_real])
        except safe_files.OutsideRoot:
            raise PathRejected(
                "invalid", f"absolute log path {relpath!r} is outside the log root {root_real}"
            ) from None
        pure = PurePosixPath(*below)
    parts = [p for p in pure.parts if p not in ("", ".")]
    if not parts:
        raise PathRejected("invalid", f"log path {relpath!r} names the log root, not a file")
    return PurePosixPath(*parts)


def _symlink_named(root_real: str, rel: PurePosixPath) -> str:
    """For the message only: the first component below the root that is a symlink now."""
    current = root_real
    for part in rel.parts:
        current = os.path.join(current, part)
        if os.path.islink(current):
            return part
    return rel.parts[-1]


def open_confined(root: Path, relpath: str) -> tuple[int, str]:
    """Open (append, create) the file `relpath` under `root`; return (fd, its path).

    The open is the one file-safety walk (`restart_agent.safe_files.open_confined`,
    `write=True`): one component at a time with `O_NOFOLLOW` from the root, so a symlink
    below the root is refused whether it points inside or outside (docs/service.md,
    "Paths: the symlink rule"), missing directories are created inside the walk, and a
    FIFO cannot hang the writer. Raises PathRejected with a message fit for the client.
    """
    rel = confine(root, relpath)
    root_real = os.path.realpath(root)
    if not os.path.isdir(root_real):
        raise PathRejected("os", f"log root {root_real} does not exist")
    final = os.path.join(root_real, *rel.parts)
    try:
        fd = safe_files.open_confined(final, [root_real], write=True)
    except safe_files.SymlinkRefused:
        part = _symlink_named(root_real, rel)
        raise PathRejected(
            "escape",
            f"log path {relpath!r} passes through symlink {part!r} (no symlink below the log "
            "root is followed)",
        ) from None
    except safe_files.OutsideRoot:
        raise PathRejected("escape", f"log path {relpath!r} leaves the log root") from None
    except safe_files.NotRegularFile as exc:
        raise PathRejected("os", f"log path {relpath!r} is {exc.strerror}") from None
    except OSError as exc:
        raise PathRejected("os", f"cannot open log path {relpath!r}: {exc.strerror}") from None
    return fd, final
