"""Where the health and NUMA code reads the kernel's sysfs: `/sys`, or a fake tree in tests.

`RELAUNCH_SYSFS_ROOT` (or an explicit `root` argument) replaces `/sys`, so the NIC link
check and the NUMA binding read a tree a test built on disk. Also parses the kernel's CPU
list format (`0-3,8,10-11`).
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_SYSFS_ROOT = "RELAUNCH_SYSFS_ROOT"


def sysfs_root(root: str | os.PathLike[str] | None = None) -> Path:
    """The sysfs root: `root`, else `$RELAUNCH_SYSFS_ROOT`, else `/sys`."""
    if root is not None:
        return Path(root)
    return Path(os.environ.get(ENV_SYSFS_ROOT) or "/sys")


def read_text(path: Path) -> str | None:
    """The stripped content of a sysfs file, or None when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


MAX_CPU = 1 << 16  # CPU numbers above this are no machine's (and a huge range would exhaust memory)


def parse_cpulist(text: str) -> set[int]:
    """`0-3,8,10-11` -> {0, 1, 2, 3, 8, 10, 11}; raises ValueError on anything else,
    also on a CPU number of MAX_CPU or more."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if sep:
            first, last = int(lo), int(hi)
            if last < first or first < 0 or last >= MAX_CPU:
                raise ValueError(f"bad CPU range {part!r}")
            cpus.update(range(first, last + 1))
        else:
            cpu = int(part)
            if not 0 <= cpu < MAX_CPU:
                raise ValueError(f"bad CPU number {part!r}")
            cpus.add(cpu)
    return cpus


def format_cpulist(cpus: set[int] | list[int]) -> str:
    """{0, 1, 2, 5} -> `0-2,5` (the kernel's format)."""
    out: list[str] = []
    ordered = sorted(set(cpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)
