"""Flight Recorder analysis: read per-rank dumps, find stalled process groups, name culprits.

Public API (see docs/flight_recorder.md):

- `analyze_paths(paths) -> dict` — read the dumps under `paths` (files or directories) and
  return the JSON-ready result (`culprit_ranks`, `groups`, `missing_ranks`, `unreadable`, ...).
  Raises `NoDumpsError` when nothing readable was found, FileNotFoundError for a missing path.
- `culprit_ranks(result) -> list[int]` — the sorted culprit ranks of such a result.
- `render_text(result) -> str` — the human-readable report.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from relaunch.attribution.fr.analyzer import analyze
from relaunch.attribution.fr.reader import DumpSet, read_paths
from relaunch.attribution.fr.render import render_text

__all__ = ["NoDumpsError", "analyze", "analyze_paths", "culprit_ranks", "read_paths", "render_text"]


class NoDumpsError(ValueError):
    """No readable Flight Recorder dump among the given paths (message lists why)."""


def analyze_paths(paths: Sequence[str | Path], *, workers: int | None = None) -> dict[str, Any]:
    """Analyse the Flight Recorder dumps under `paths`; see the module docstring."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not paths:
        raise NoDumpsError("no paths given")
    ds: DumpSet = read_paths(paths, workers=workers)
    if not ds.dumps:
        if ds.problems:
            first = ds.problems[0]
            more = f" (and {len(ds.problems) - 1} more)" if len(ds.problems) > 1 else ""
            raise NoDumpsError(f"no readable dump: {first.path}: {first.error}{more}")
        raise NoDumpsError("no Flight Recorder dump files found (names must end in a rank number)")
    return analyze(ds)


def culprit_ranks(result: Mapping[str, Any]) -> list[int]:
    """The sorted culprit ranks of an `analyze_paths` result."""
    return sorted(int(r) for r in result.get("culprit_ranks", []))
