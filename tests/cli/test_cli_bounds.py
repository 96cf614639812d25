"""Huge, negative and non-finite numbers in every numeric option of `analyze`, `fr`,
`serve` and `mcp`: a one-line error and exit 2, before anything runs (issue 12, item 3)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HUGE = "9223372036854775808"  # 2**63: overflows SQLite INTEGER and C longs

CASES = [
    ("analyze", "--cycle", HUGE),
    ("analyze", "--cycle", "-1"),
    ("analyze", "--cycle", "9" * 5000),
    ("analyze", "--cycle", "2147483648"),  # over PostgreSQL INTEGER
    ("analyze", "--ft-llm-timeout", "1e308"),
    ("analyze", "--ft-llm-timeout", "nan"),
    ("analyze", "--ft-llm-context-tokens", HUGE),
    ("fr", "--workers", HUGE),
    ("fr", "--workers", "0"),
    ("serve", "--port", HUGE),
    ("serve", "--workers", HUGE),
    ("serve", "--max-pending", HUGE),
    ("serve", "--max-body-bytes", "1" + "0" * 30),
    ("serve", "--max-upload-bytes", "-1"),
    ("serve", "--rate-limit", "nan"),
    ("serve", "--rate-limit", "inf"),
    ("serve", "--rate-burst", HUGE),
    ("serve", "--poll-interval", "1e999"),
    ("serve", "--analysis-timeout", "1e999"),
    ("serve", "--max-no-progress-restarts", HUGE),
    ("serve", "--startup-window", "nan"),
    ("mcp", "--port", HUGE),
    ("mcp", "--port", "-5"),
]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), RELAUNCH_HOME=str(cwd / "home"))
    return subprocess.run(
        [sys.executable, "-m", "relaunch.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,  # hang detector only: a rejected option returns at once
    )


@pytest.mark.parametrize(("cmd", "option", "value"), CASES)
def test_out_of_range_number_is_a_one_line_usage_error(tmp_path, cmd, option, value):
    log = tmp_path / "cycle_0.log"
    log.write_text("[rank0]: RuntimeError: NCCL error\n")
    positional = {"analyze": [str(log)], "fr": [str(tmp_path)]}.get(cmd, [])
    extra = ["--db", f"sqlite:///{tmp_path / 'x.db'}", "--job-id", "j"] if cmd == "analyze" else []
    p = _cli(cmd, *positional, *extra, f"{option}={value}", cwd=tmp_path)
    assert p.returncode == 2, (p.returncode, p.stderr[-500:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert lines[0].startswith(f"relaunch {cmd}: error:") and option in lines[0], lines[0]
    assert len(lines[0]) < 300
    assert p.stdout == ""
    assert not (tmp_path / "x.db").exists()  # nothing was written
