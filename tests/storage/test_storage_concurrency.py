"""Several real processes share one SQLite file: first open (migration) and upserts race.

Each writer process opens a brand-new database at the same moment, then saves verdicts for
cycles that every process also writes (same (job, cycle)) and for its own job. Nothing may
fail and nothing may be duplicated.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from relaunch.storage import open_repository
from tests._storage_helpers import REPO_ROOT, pg_url_or_skip, sqlite_url

WRITER = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from tests._storage_helpers import verdict
from relaunch.storage import open_repository
url, me, start, rounds = sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
while time.time() < start:
    time.sleep(0.005)
repo = open_repository(url)
for i in range(rounds):
    repo.save_verdict("shared", i % 4, verdict(rule=f"{me}-{i}", evidence_lines=(10, 11, 12)))
    repo.register_cycle(f"own-{me}", i, f"/logs/{me}/{i}.log", node=me)
    repo.save_verdict(f"own-{me}", i, verdict(rule=f"{me}-{i}"))
repo.close()
print("ok")
"""


def _run_writers(url: str, writers: int, rounds: int) -> None:
    start = time.time() + 1.5  # all processes are importing by then; they open together
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(REPO_ROOT), url, str(k), str(start), str(rounds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(writers)
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert out.strip() == "ok"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_concurrent_writers_never_fail_or_duplicate(backend: str, tmp_path: Path) -> None:
    url = sqlite_url(tmp_path) if backend == "sqlite" else pg_url_or_skip()
    writers, rounds = 4, 12
    _run_writers(url, writers, rounds)
    repo = open_repository(url)
    shared = repo.list_cycles("shared")
    assert [c.cycle for c in shared] == [0, 1, 2, 3]
    for c in shared:
        full = repo.get_cycle("shared", c.cycle)
        # exactly the evidence of the one verdict that won (primary + 2 more lines), no mix
        assert [e["line"] for e in full.evidence] == [10, 11, 12]
        assert full.rule == full.verdict["rule"]
    for k in range(writers):
        own = repo.list_cycles(f"own-{k}")
        assert [c.cycle for c in own] == list(range(rounds))
        assert all(c.node == str(k) and c.decision == "RESTART" for c in own)
    assert len(repo.list_jobs()) == writers + 1
    repo.close()
