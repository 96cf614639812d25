"""Reading a small JSON state file that others may write: never hang, never blow up.

`read_small_text` opens without blocking (a FIFO put in the file's place would block a
plain `open` forever), accepts only a regular file (symlinks are followed, to a regular
file only: `/dev/zero` is refused), and reads at most `limit` bytes. `loads_json` turns a
document nested too deeply for the parser into a ValueError like any other bad JSON.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

DEFAULT_LIMIT = 4 * 1024 * 1024


class UnsafeFileError(OSError):
    """The path is not a regular file, or it is larger than the limit."""


def read_small_text(path: str | os.PathLike[str], limit: int = DEFAULT_LIMIT) -> str:
    """The file's text (UTF-8). FileNotFoundError when missing; UnsafeFileError when not a
    regular file or over `limit` bytes; other OSError / UnicodeDecodeError as raised."""
    fd = os.open(os.fspath(path), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFileError(f"{os.fspath(path)} is not a regular file")
        if info.st_size > limit:
            raise UnsafeFileError(f"{os.fspath(path)} is larger than {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:  # grew while being read
            raise UnsafeFileError(f"{os.fspath(path)} is larger than {limit} bytes")
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8")


def loads_json(text: str) -> Any:
    """json.loads; a document nested too deeply is a ValueError too."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
