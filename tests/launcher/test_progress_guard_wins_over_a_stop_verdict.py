"""The progress guard and a STOP verdict at the same boundary (`--ft-attribution-stop-action
no-restart`, embedded history): the guard ends the job when its limit is reached, before
the last cycle's verdict arrives; that verdict (STOP `job_no_progress_ceiling`, the same
threshold) used to turn the exit code into 3 and the recorded end into "STOP verdict",
after the console had said the launcher ended the job. The guard's decision stands: exit 5,
the job recorded `stopped` with the guard's reason, the STOP printed as recorded only.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests._launcher_helpers import REPO, engine_available, job_args, run_relaunch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

WORKER = REPO / "tests" / "workers" / "progress_job.py"


def test_guard_wins_over_a_stop_verdict_arriving_after_it(tmp_path: Path) -> None:
    why = engine_available()
    if why:
        pytest.skip(why)
    db = tmp_path / "pg.db"
    r = run_relaunch(
        tmp_path,
        [*job_args(tmp_path, "pg", "--ft-db-url", f"sqlite:///{db}",
                   "--ft-attribution-stop-action", "no-restart",
                   "--ft-max-no-progress-restarts", "2", "--max-restarts", "10"),
         str(WORKER), "--mode", "stuck"],
        timeout=280,
    )  # fmt: skip
    assert r.returncode == 5, r.stderr
    ended = "relaunch: job pg ended by the launcher: no progress: 2 consecutive restarts"
    assert ended in r.stderr
    # the scenario happened: the last cycle's verdict was a STOP, and it did not win
    assert "note: STOP verdict for cycle 2 was recorded, not acted on:" in r.stderr, r.stderr
    assert "job stopped by verdict" not in r.stderr
    with sqlite3.connect(db) as conn:
        job = conn.execute("select state, exit_code, end_reason from jobs").fetchone()
        last = conn.execute("select decision, rule from cycles where cycle = 2").fetchone()
    assert job[:2] == ("stopped", 5) and job[2].startswith("no progress: 2 consecutive"), job
    assert last == ("STOP", "stop.job_no_progress_ceiling")
