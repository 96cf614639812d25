"""Run `relaunch analyze` as a real subprocess from the repository root (shared by the
analyze, scenario and review tests)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# analyze reads the default history (sqlite:///$RELAUNCH_HOME/relaunch.db) with --job-id:
# never the real home's; an empty folder unless a test sets RELAUNCH_HOME / RELAUNCH_DB
_EMPTY_HOME = tempfile.mkdtemp(prefix="relaunch-test-home-")


def hermetic_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.setdefault("RELAUNCH_HOME", _EMPTY_HOME)
    env.pop("RELAUNCH_DB", None)
    return env


def run_analyze(
    *args: str | Path, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`python -m relaunch_cli analyze ARGS` (after `prefix`, e.g. a shell), output as text."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "relaunch.cli", "analyze", *map(str, args)],
        cwd=REPO_ROOT,
        env=hermetic_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
