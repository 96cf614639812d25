"""Reading a small JSON state file that others may write: never hang, never blow up.

`read_small_text` (through `restart_agent.safe_files`, the one file-safety path) opens without blocking (a FIFO put in the file's place would block a
plain `open` forever), accepts only a regular file (symlinks are followed, to a regular
file only: `/dev/zero` is refused), and reads at most `limit` bytes. `loads_json` turns a
document nested too deeply for the parser into a ValueError like any other bad JSON.
"""

from __future__ import annotations

import json
import os
from typing import Any

from relaunch.restart_agent import safe_files

DEFAULT_LIMIT = 4 * 1024 * 1024


class UnsafeFileError(OSError):
    """The path is not a regular file, or it is larger than the limit."""


def read_small_text(path: str | os.PathLike[str], limit: int = DEFAULT_LIMIT) -> str:
    """The file's text (UTF-8). FileNotFoundError when missing; UnsafeFileError when not a
    regular file or over `limit` bytes (refused before reading: `restart_agent.safe_files`);
    other OSError / UnicodeDecodeError as raised."""
    try:
        data = safe_files.read_bounded(path, limit)
    except (safe_files.NotRegularFile, IsADirectoryError):
        raise UnsafeFileError(f"{os.fspath(path)} is not a regular file") from None
    except safe_files.TooLarge:
        raise UnsafeFileError(f"{os.fspath(path)} is larger than {limit} bytes") from None
    return data.decode("utf-8")


def loads_json(text: str) -> Any:
    """json.loads; a document nested too deeply is a ValueError too."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
