"""Files the attribution side writes: atomic JSON documents and safe file names.

Owns the one way artifacts are written (audit artifacts, LLM sidecars, node-health
records: `write_json_atomic`, a temporary file in the target's directory, then a rename
over the target) and how a client-chosen name (job id, node) becomes part of a file name
(`safe_name`).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any


def write_json_atomic(path: str | os.PathLike[str], doc: Any, *, sort_keys: bool = False) -> Path:
    """Write `doc` as indented JSON (non-JSON values as `str`) to `path`; returns the path.

    Creates the parent directory. On any error the temporary file is removed and the
    previous content of `path`, if any, is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2, sort_keys=sort_keys, default=str)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_name(name: str) -> str:
    """`name` with every character other than ASCII letters, digits and `._-` as `_`."""
    return _UNSAFE.sub("_", name)
