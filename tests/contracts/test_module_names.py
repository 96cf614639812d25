"""No two modules of the project's packages (and relaunch/'s own files) share a file
name, except the ones docs/ARCHITECTURE.md lists under "Module file names" (same role in
parallel packages).

Files are listed, nothing imported. A repeated name missing from the doc's table fails, and
so does a row of the table that no longer matches the files (the list only ever shrinks or
stays true).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
PACKAGES = ("restart_agent", "storage", "web", "attribution", "launcher", "checkpoint")
PACKAGES += ("relaunch_cli",)
# the same name in every package by Python's rules (generated *_pb2 modules are skipped)
ALWAYS = {"__init__.py", "__main__.py"}


def _repeated() -> dict[str, set[str]]:
    by_name: dict[str, set[str]] = defaultdict(set)
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            if (
                "__pycache__" in f.parts
                or f.name in ALWAYS
                or f.name.endswith(("_pb2.py", "_pb2_grpc.py"))
            ):
                continue
            by_name[f.name].add(f.relative_to(ROOT).as_posix())
    for f in (ROOT / "relaunch").glob("*.py"):  # its own files; the rest are links
        if f.name not in ALWAYS:
            by_name[f.name].add(f.relative_to(ROOT).as_posix())
    return {name: paths for name, paths in by_name.items() if len(paths) > 1}


def _documented() -> dict[str, set[str]]:
    text = DOC.read_text()
    section = text.split("### Module file names", 1)[1].split("\n#", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        m = re.match(r"\| `([\w.]+)` \| ([^|]+) \|", line)
        if m:
            rows[m.group(1)] = set(re.findall(r"`([\w/.]+)`", m.group(2)))
    return rows


def test_documented_table_is_read() -> None:
    rows = _documented()
    assert rows, "no rows under '### Module file names' in docs/ARCHITECTURE.md"
    for name, paths in rows.items():
        assert paths and all(p.endswith("/" + name) for p in paths), (name, paths)


def test_repeated_file_names_are_exactly_the_documented_exceptions() -> None:
    repeated, documented = _repeated(), _documented()
    undocumented = {n: sorted(p) for n, p in repeated.items() if documented.get(n) != p}
    stale = {n: sorted(p) for n, p in documented.items() if repeated.get(n) != p}
    assert not undocumented, (
        f"modules sharing a file name, not listed in docs/ARCHITECTURE.md: {undocumented}"
    )
    assert not stale, (
        f"rows of docs/ARCHITECTURE.md 'Module file names' that no longer match: {stale}"
    )
