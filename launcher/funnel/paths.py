"""Confinement of client-chosen log paths to the writer's root directory.

A funnel client names the file it writes as a path relative to the writer's root (derived
by the launcher, e.g. `<log-dir>/<job-id>`). `open_confined` rejects empty paths, NUL
bytes, `..` components, absolute paths outside the root and symlinks that lead out of it,
creates missing directories only after checking each existing component, and verifies the
opened file descriptor really lies under the root (no check/open race).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

MAX_PATH_CHARS = 1024


class PathRejected(Exception):
    """A client path the writer refuses. `kind` maps to a gRPC status code."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # "invalid" | "escape" | "os"
        self.message = message


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


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
        if not _within(os.path.normpath(relpath), root_real):
            raise PathRejected(
                "invalid", f"absolute log path {relpath!r} is outside the log root {root_real}"
            )
        pure = PurePosixPath(os.path.relpath(os.path.normpath(relpath), root_real))
    parts = [p for p in pure.parts if p not in ("", ".")]
    if not parts:
        raise PathRejected("invalid", f"log path {relpath!r} names the log root, not a file")
    return PurePosixPath(*parts)


def open_confined(root: Path, relpath: str) -> tuple[int, str]:
    """Open (append, create) the file `relpath` under `root`; return (fd, real path).

    Raises PathRejected with a message fit for the client.
    """
    rel = confine(root, relpath)
    root_real = os.path.realpath(root)
    if not os.path.isdir(root_real):
        raise PathRejected("os", f"log root {root_real} does not exist")
    current = root_real
    for part in rel.parts[:-1]:
        candidate = os.path.join(current, part)
        if os.path.islink(candidate):
            target = os.path.realpath(candidate)
            if not _within(target, root_real):
                raise PathRejected(
                    "escape", f"log path {relpath!r} leaves the log root through symlink {part!r}"
                )
            candidate = target
        elif not os.path.exists(candidate):
            try:
                os.mkdir(candidate, 0o755)
            except FileExistsError:
                pass
            except OSError as exc:
                raise PathRejected(
                    "os", f"cannot create directory for {relpath!r}: {exc.strerror}"
                ) from exc
        real = os.path.realpath(candidate)
        if not _within(real, root_real):
            raise PathRejected("escape", f"log path {relpath!r} leaves the log root")
        if not os.path.isdir(real):
            raise PathRejected("os", f"log path {relpath!r}: {part!r} is not a directory")
        current = real
    final = os.path.join(current, rel.parts[-1])
    if os.path.islink(final):
        target = os.path.realpath(final)
        if not _within(target, root_real):
            raise PathRejected(
                "escape", f"log path {relpath!r} is a symlink that leaves the log root"
            )
        final = target
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    # O_NONBLOCK: a FIFO planted in the root must not hang the writer (no effect on files).
    flags |= getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(final, flags, 0o644)
    except OSError as exc:
        raise PathRejected("os", f"cannot open log path {relpath!r}: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PathRejected("os", f"log path {relpath!r} is not a regular file")
        proc_link = f"/proc/self/fd/{fd}"
        opened = os.path.realpath(proc_link) if os.path.exists(proc_link) else final
        if not _within(opened, root_real):
            raise PathRejected("escape", f"log path {relpath!r} leaves the log root")
    except BaseException:
        os.close(fd)
        raise
    return fd, opened
