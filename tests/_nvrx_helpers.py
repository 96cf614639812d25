"""Find NVRx 0.7.0 (nvidia-resiliency-ext) for the drop-in tests, or say why not.

The wheel comes from `scripts/fetch_nvrx.sh` (into .cache/nvrx/) or from the path in
RELAUNCH_NVRX_WHEEL; it is unpacked, not installed (its wheels are tagged for CPython 3.12,
its client and launcher modules are pure Python). Tests skip with the reason when it is absent.
"""

from __future__ import annotations

import importlib.util
import os
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VERSION = "0.7.0"


def nvrx_wheel() -> Path | str:
    """The wheel's path, or why there is none (a skip reason)."""
    given = os.environ.get("RELAUNCH_NVRX_WHEEL")
    found = [Path(given)] if given else sorted((REPO / ".cache" / "nvrx").glob("*.whl"))
    found = [p for p in found if p.is_file() and f"-{VERSION}-" in p.name]
    if not found:
        return (
            f"NVRx {VERSION} wheel not fetched: run scripts/fetch_nvrx.sh "
            "(or set RELAUNCH_NVRX_WHEEL)"
        )
    missing = [m for m in ("psutil", "defusedxml") if importlib.util.find_spec(m) is None]
    if missing:
        return f"NVRx's client imports {', '.join(missing)}: run scripts/fetch_nvrx.sh"
    return found[0]


def unpack(wheel: Path, into: Path) -> Path:
    """Unpack the wheel under `into`; the directory to put on sys.path / PYTHONPATH."""
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(into)
    return into
