"""relaunch.checkpoint with an fsspec persistent tier (`file://`, `memory://`).

A real rank (gloo, world 1) in a subprocess (tests/workers/ckpt_fsspec.py): DCP's spawned
writer process and the finisher commit through fsspec. `file://`: the writer writes through
`FsspecWriter` straight into the URL tier; `memory://`: the tier is the rank's own memory,
so the save goes to the local tier and is drained there (DCP's writer process cannot reach
another process's memory:// — a manager that asks for it without a local tier gets a
one-line CheckpointError). In both, the marker is the last thing written:
`latest_complete` skips a folder without one and one whose file is truncated, and a
flipped byte is named, with its URL, at load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "tests" / "workers" / "ckpt_fsspec.py"


@pytest.mark.parametrize("mode", ["file", "memory"])
def test_fsspec_persistent_tier_commits_atomically(mode: str, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run(
        [sys.executable, str(WORKER), "--mode", mode, "--root", str(tmp_path)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    scheme = "file://" if mode == "file" else "memory://"
    assert out["outcome_1"] == out["outcome_2"] == "committed"
    assert out["persistent_2"].startswith(scheme) and out["persistent_2"].endswith(
        "/step_000000002"
    )
    assert out["files_2"] == [".metadata", "COMMITTED", "__0_0.distcp"]
    assert out["leftovers"] == []  # the temporary folders were moved, nothing left behind
    assert out["latest"] == 2  # never torn step 8 (no marker) or 9 (a truncated file)
    assert out["load_equal_2"] is True
    assert out["load_latest"] == [2, "persistent", True]
    assert out["corrupted"].startswith(f"checkpoint file {scheme}")
    assert "__0_0.distcp is corrupted: crc32" in out["corrupted"]
    assert "\n" not in out["corrupted"]
    if mode == "file":
        assert (tmp_path / "persistent" / "step_000000002" / "COMMITTED").is_file()
    else:
        assert out["memory_without_local"].startswith("a memory:// persistent tier needs local_dir")
