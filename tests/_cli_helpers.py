"""Run `relaunch analyze` as a real subprocess from the repository root (shared by the
analyze, scenario and review tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def run_analyze(
    *args: str | Path, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`python -m relaunch_cli analyze ARGS` (after `prefix`, e.g. a shell), output as text."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "relaunch.cli", "analyze", *map(str, args)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
