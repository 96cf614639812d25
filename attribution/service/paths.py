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

MAX_PATH_LEN = 4096


def _within(path: str, root: Path) -> bool:
    root_s = str(root)
    return path == root_s or path.startswith(root_s.rstrip(os.sep) + os.sep)


def confine(raw: str, roots: list[Path], *, must_exist: bool = True) -> Path:
    """`raw` (normalised) if it is a readable regular file under a root (or missing, with
    `must_exist=False`)."""
    if not isinstance(raw, str) or not raw:
        raise ApiError("invalid_path", "log_path must be a non-empty string")
    if len(raw) > MAX_PATH_LEN or "\x00" in raw:
        raise ApiError("invalid_path", "log_path is too long or contains a NUL byte")
    if not os.path.isabs(raw):
        raise ApiError("invalid_path", f"log_path must be absolute: {raw!r}")
    if ".." in Path(raw).parts:
        raise ApiError("invalid_path", f"log_path must not contain '..': {raw!r}")
    if not roots:
        raise ApiError("outside_allowed_root", "the service has no --allowed-root configured")
    lexical = os.path.normpath(raw)
    if not any(_within(lexical, r) for r in roots):
        raise ApiError("outside_allowed_root", f"log_path is outside the allowed roots: {raw!r}")
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
