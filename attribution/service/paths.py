"""Confine client-supplied paths to the configured allowed roots.

Rejects: relative paths, `..` components, NUL bytes, symlinks that resolve outside every
root, and anything that is not a regular file. Errors are `ApiError`s (400/403/404).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from relaunch.attribution.service.errors import ApiError

MAX_PATH_LEN = 4096


def _within(path: str, root: Path) -> bool:
    root_s = str(root)
    return path == root_s or path.startswith(root_s.rstrip(os.sep) + os.sep)


def confine(raw: str, roots: list[Path], *, must_exist: bool = True) -> Path:
    """Return the resolved real path of `raw` if it is a readable regular file under a root."""
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
    real = os.path.realpath(lexical)
    if not any(_within(real, r) for r in roots):
        raise ApiError(
            "outside_allowed_root", f"log_path resolves outside the allowed roots: {raw!r}"
        )
    try:
        st = os.stat(real)
    except FileNotFoundError:
        if must_exist:
            raise ApiError("not_found", f"log file not found: {raw!r}") from None
        return Path(real)
    except PermissionError:
        raise ApiError("unreadable", f"log file is not accessible: {raw!r}") from None
    except OSError as exc:
        raise ApiError("invalid_path", f"cannot stat log_path: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ApiError("not_regular_file", f"log_path is not a regular file: {raw!r}")
    if not os.access(real, os.R_OK):
        raise ApiError("unreadable", f"log file is not readable: {raw!r}")
    return Path(real)


def confine_dir(raw: str, roots: list[Path], *, must_exist: bool = True) -> Path:
    """Like `confine`, for a directory (a launcher's Flight Recorder dump folder): the
    resolved real path, inside a root, a directory when it exists."""
    probe = confine(raw.rstrip(os.sep) + os.sep + "_", roots, must_exist=False)
    real = probe.parent
    if not any(_within(str(real), r) for r in roots):
        raise ApiError("outside_allowed_root", f"path resolves outside the allowed roots: {raw!r}")
    if real.exists() and not real.is_dir():
        raise ApiError("invalid_path", f"not a directory: {raw!r}")
    if must_exist and not real.is_dir():
        raise ApiError("not_found", f"directory not found: {raw!r}")
    return real
