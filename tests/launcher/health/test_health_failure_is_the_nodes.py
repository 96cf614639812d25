"""A single-node job whose node fails a run-time health check, with the embedded history:
exit 4, the job recorded `failed` with exit code 4 and the health reason, and the cycle's
verdict attributed to the node (infrastructure), not to the workload.

The storage probe's reason quotes an OS error (`FileNotFoundError: [Errno 2] ...`); the
launcher's `[relaunch] node unhealthy during the run: ...` line used to be read by the
restart agent as the workload's `fs.not_found`, so the verdict blamed the training script.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests._launcher_helpers import REPO, engine_available, job_args, run_relaunch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

WORKER = REPO / "tests" / "workers" / "health_job.py"


def test_run_time_health_failure_is_recorded_as_the_node_s(tmp_path: Path) -> None:
    why = engine_available()
    if why:
        pytest.skip(why)
    (tmp_path / "ctl").mkdir()
    db = tmp_path / "h.db"
    missing = tmp_path / "not-mounted"  # a mount missing on this node
    r = run_relaunch(
        tmp_path,
        [*job_args(tmp_path, "h4", "--ft-db-url", f"sqlite:///{db}",
                   "--ft-storage-healthcheck-path", str(missing),
                   "--ft-node-health-check-interval", "0.1"),
         str(WORKER), "--dir", str(tmp_path / "ctl")],
        timeout=200,
    )  # fmt: skip
    assert r.returncode == 4, r.stderr
    assert "node unhealthy during the run: storage:" in r.stderr
    with sqlite3.connect(db) as conn:
        job = conn.execute(
            "select state, exit_code, end_reason from jobs where job_id = 'h4'"
        ).fetchone()
        cycle = conn.execute(
            "select outcome, decision, failure_class, domain, node_health from cycles"
            " where cycle = 0"
        ).fetchone()
    state, code, reason = job
    assert (state, code) == ("failed", 4), job
    assert reason.startswith(  # which check failed, not only that one did
        f"the node health check found this node unhealthy: storage: {missing}: FileNotFoundError"
    ), reason
    outcome, decision, failure_class, domain, node_health = cycle
    assert outcome == "failed" and decision == "RESTART"
    assert (failure_class, domain) == ("node_failure", "infrastructure"), cycle
    assert '"healthy": false' in node_health
