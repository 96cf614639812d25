"""Confine client-supplied paths to the configured allowed roots.

Rejects: relative paths, `..` components, NUL bytes, any symlink below the root (inside or
outside it: the documented rule, the same `restart_agent.safe_files` walk as every read),
and anything that is not a regular file. Errors are `ApiError`s (400/403/404).
"""

from __future__ import annotations

import os
from pathlib import Path

from relaunch.attribution.service.confined import open_confined
from relaunch.attribution.service.errors import ApiError
from relaunch.restart_agent import safe_files

MAX_PATH_LEN = safe_files.MAX_PATH_LEN


def confine(raw: str, roots: list[Path], *, must_exist: bool = True) -> Path:
    """`raw` (normalised) if it is a readable regular file under a root (or missing, with
    `must_exist=False`)."""
    try:
        lexical = safe_files.check_path(raw, MAX_PATH_LEN)
    except safe_files.InvalidPath as exc:
        raise ApiError("invalid_path", f"log_path {exc.strerror}") from None
    if not roots:
        raise ApiError("outside_allowed_root", "the service has no --allowed-root configured")
    try:  # the same walk every later read makes: no symlink below the root, regular only
        os.close(open_confined(lexical, roots))
    except ApiError as exc:
        if exc.error_code == "not_found" and not must_exist:
            return Path(lexical)
        raise
    return Path(lexical)


def confine_dir(raw: str, roots: list[Path], *, must_exist: bool = True) -> Path:
    """Like `confine`, for a directory (a launcher's Flight Recorder dump folder): the
    normalised path, inside a root with no symlink below it, a directory when it exists."""
    real = confine(raw.rstrip(os.sep) + os.sep + "_", roots, must_exist=False).parent
    if real.exists() and not real.is_dir():
        raise ApiError("invalid_path", f"not a directory: {raw!r}")
    if must_exist and not real.is_dir():
        raise ApiError("not_found", f"directory not found: {raw!r}")
    return real
