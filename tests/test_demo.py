"""`relaunch demo` end to end: real 2-rank training, RESTART on the infra fault, STOP on the bug."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from tests._launcher_helpers import engine_available, run_relaunch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_demo_restarts_then_stops(tmp_path: Path) -> None:
    why = engine_available()
    if why:
        pytest.skip(why)
    work = tmp_path / "demo"
    r = run_relaunch(tmp_path, ["--workdir", str(work)], cmd="demo", timeout=170)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    verdicts = re.findall(r"^  cycle (\d+): (STOP|RESTART) \[([\w.]+)\]: (.+)$", out, re.M)
    decisions = [(int(c), d) for c, d, _, _ in verdicts]
    # cycle 0: the NCCL-like fault is infrastructure -> RESTART; cycle 1: the bad sample
    # after progress -> RESTART; cycle 2: the same bug again without progress -> STOP
    assert decisions == [(0, "RESTART"), (1, "RESTART"), (2, "STOP")], out
    assert "nccl" in verdicts[0][3].lower()
    assert "exit code       3 (stopped by verdict)" in out
    job_dir = next((work / "logs").iterdir())
    cycle1 = (job_dir / "cycle_1.log").read_text()
    assert "resumed from checkpoint" in cycle1  # restarted from its checkpoint ...
    assert "[relaunch] progress rank=0 iteration=15 checkpoint=" in cycle1  # ... and advanced
    # the database holds the three verdicts, the audit dir one artifact per verdict
    with sqlite3.connect(work / "relaunch.db") as db:
        tables = {row[0] for row in db.execute("select name from sqlite_master where type='table'")}
    assert tables, "database has no tables"
    audits = sorted((work / "audit").rglob("*.json"))
    assert len(audits) == 3
    last = json.loads(audits[-1].read_text())
    assert last.get("decision", last.get("verdict", {}).get("decision")) == "STOP"


def test_demo_bad_workdir_is_one_line_error(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    r = run_relaunch(tmp_path, ["--workdir", str(f)], cmd="demo", timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"relaunch demo: error: --workdir {f} exists and is not a directory"
    ]
