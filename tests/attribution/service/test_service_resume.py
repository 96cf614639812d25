"""A service killed mid-analysis resumes it on its next start (issue 12, item 4), and a
slow analysis holds nobody else back (item 10); against the real `relaunch serve`.

Analyses are kept in flight deterministically: the service runs with
`RELAUNCH_TEST_ANALYSIS_HOLD` (attribution/service/hold.py), and an analysis of a held job
waits at a FIFO until the test releases it. No sleeps, no timed assertions.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests._service_helpers import (
    hold_analyses,
    release_analyses,
    require_restart_agent,
)

require_restart_agent()

pytestmark = pytest.mark.slow

GOOD = "[rank0]: iteration 5 | lm loss 2.5\n[rank0]: ValueError: bad learning rate -1\n"
CUDA = "[rank3]: RuntimeError: CUDA error: unspecified launch failure\n"
HOLD = "RELAUNCH_TEST_ANALYSIS_HOLD"


def _terminal(c, log: Path, job: str, cycle: int) -> None:
    body = {"log_path": str(log), "job_id": job, "cycle_id": cycle, "analysis_intent": "terminal"}
    r = c.post("/logs", json=body)
    assert r.status_code == 200 and r.json()["status"] == "pending", r.text


def _verdict(c, job: str, cycle: int, wait: bool) -> dict:
    r = c.get(f"/v1/jobs/{job}/cycles/{cycle}/verdict", params={"wait": str(wait).lower()})
    assert r.status_code == 200, r.text
    return r.json()


def test_analyses_killed_with_the_service_are_resumed_or_failed(service_factory, tmp_path):
    hold = tmp_path / "hold"
    hold_analyses(hold, "crash")
    svc = service_factory(env={HOLD: str(hold)}, extra_args=["--workers", "1"])
    (svc.root / "c").mkdir()
    logs = [svc.root / "a.log", svc.root / "b.log", svc.root / "c" / "d.log"]
    for log in logs:
        log.write_text(GOOD)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "d.log").write_text(CUDA)
    with svc.client() as c:
        for i, log in enumerate(logs):
            _terminal(c, log, "crash", i)
        assert [_verdict(c, "crash", i, False)["status"] for i in range(3)] == ["pending"] * 3
    assert svc.proc is not None
    svc.proc.kill()  # SIGKILL while cycle 0 is being analysed and 1, 2 are queued
    svc.proc.wait(30)
    svc.proc = None
    logs[1].unlink()  # gone: cannot be resumed
    (svc.root / "c").rename(svc.root / "c.orig")
    (svc.root / "c").symlink_to(outside, target_is_directory=True)  # escapes: not resumed
    svc.env = {}  # no hold after the restart
    svc.start()
    with svc.client() as c:
        first = _verdict(c, "crash", 0, True)  # the resumed analysis is in flight: waits
        assert first["status"] == "completed", first
        assert first["verdict"]["decision"] in ("STOP", "RESTART")
        assert _verdict(c, "crash", 0, False)["status"] == "completed"
        gone = _verdict(c, "crash", 1, False)
        assert gone["status"] == "failed" and "not found" in gone["error"], gone
        escaped = _verdict(c, "crash", 2, False)
        assert escaped["status"] == "failed" and "symlink" in escaped["error"], escaped
        nvrx = c.get("/logs", params={"log_path": str(logs[1]), "wait": "false"}).json()
        assert nvrx["status"] == "completed" and nvrx["result"]["state"] == "error"
        assert "CUDA" not in c.get("/v1/jobs/crash/cycles/2").text
    svc.restart()  # nothing left to resume: the failed ones stay failed, the verdict stays
    with svc.client() as c:
        assert _verdict(c, "crash", 0, False)["status"] == "completed"
        assert _verdict(c, "crash", 1, False)["status"] == "failed"


def test_slow_analysis_does_not_hold_other_requests(service_factory, tmp_path):
    hold = tmp_path / "hold"
    hold_analyses(hold, "slow")
    svc = service_factory(
        env={HOLD: str(hold)}, extra_args=["--analysis-timeout", "3600", "--rate-limit", "0"]
    )
    answers: dict[str, object] = {}

    def slow_upload() -> None:
        with svc.client(timeout=3600) as c:
            answers["slow"] = c.post("/v1/jobs/slow/cycles/0/log", content=CUDA.encode())

    t = threading.Thread(target=slow_upload)
    t.start()
    try:
        with svc.client() as c:
            while c.get("/v1/stats").json()["analyses_inflight"] < 1:
                time.sleep(0.01)  # poll until the slow upload's analysis is held in flight
            assert c.get("/healthz").json()["status"] == "ok"
            assert c.get("/v1/jobs").status_code == 200
            assert c.get("/").status_code == 200  # dashboard
            assert _verdict(c, "slow", 0, False)["status"] == "pending"
            fast = c.post("/v1/jobs/fast/cycles/0/log", content=GOOD.encode())
            assert fast.status_code == 200 and fast.json()["status"] == "completed", fast.text
            log = svc.root / "other.log"
            log.write_text(CUDA)
            _terminal(c, log, "other", 0)
            got = c.get("/logs", params={"log_path": str(log)}).json()
            assert got["status"] == "completed"
            assert t.is_alive() and "slow" not in answers  # still held, never answered
    finally:
        release_analyses(hold, "slow")
        t.join()
    slow = answers["slow"]
    assert slow.status_code == 200 and slow.json()["status"] == "completed", slow.text


def test_request_waiting_past_the_analysis_timeout_gets_202(service_factory, tmp_path):
    hold = tmp_path / "hold"
    hold_analyses(hold, "late")
    svc = service_factory(env={HOLD: str(hold)}, extra_args=["--analysis-timeout", "0.2"])
    try:
        with svc.client() as c:
            r = c.post("/v1/jobs/late/cycles/0/log", content=CUDA.encode())
            assert r.status_code == 202, r.text
            body = r.json()
            assert body["status"] == "pending" and body["verdict"] is None
            assert "/v1/jobs/late/cycles/0/verdict" in body["message"]
            w = c.get("/v1/jobs/late/cycles/0/verdict", params={"wait": "true"})
            assert w.status_code == 202 and w.json()["status"] == "pending"
            nh = c.post("/v1/jobs/late/cycles/0/node-health", json={"node": "n1", "healthy": False})
            assert nh.status_code == 202 and nh.json()["verdict"] is None
            assert c.get("/healthz").json()["status"] == "ok"
    finally:
        release_analyses(hold, "late")
    with svc.client() as c:
        while (
            v := c.get("/v1/jobs/late/cycles/0/verdict", params={"wait": "true"})
        ).status_code == 202:
            pass  # the released analysis (and the node-health one after it) finish
        assert v.json()["status"] == "completed"


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_repository_tracks_analyses_in_flight(tmp_path, backend):
    import os as _os

    from relaunch import storage

    if backend == "postgresql":
        url = _os.environ.get("RELAUNCH_TEST_PG_URL")
        if not url:
            pytest.skip("RELAUNCH_TEST_PG_URL not set (scripts/test.sh starts PostgreSQL)")
    else:
        url = f"sqlite:///{tmp_path / 'h.db'}"
    repo = storage.open_repository(url)
    job = f"inflight-{tmp_path.name}"
    try:
        repo.register_cycle(job, 0, "/logs/a.log")
        repo.register_cycle(job, 1, "/logs/b.log")
        repo.mark_analysis_requested(job, 0)
        repo.mark_analysis_requested(job, 1)
        mine = [u for u in repo.unfinished_analyses() if u[0] == job]
        assert mine == [(job, 0, "/logs/a.log"), (job, 1, "/logs/b.log")]
        verdict = {"decision": "RESTART", "rule": "r", "basis": "b", "primary": None}
        repo.save_verdict(job, 0, verdict)
        repo.mark_analysis_failed(job, 1, "log file not found")
        assert [u for u in repo.unfinished_analyses() if u[0] == job] == []
        done, failed = repo.get_cycle(job, 0), repo.get_cycle(job, 1)
        assert done.analysis_requested_at is None and done.analysis_error is None
        assert failed.verdict is None and failed.analysis_error == "log file not found"
        repo.mark_analysis_requested(job, 1)  # asked again: in flight, not failed any more
        assert repo.get_cycle(job, 1).analysis_requested_at is not None
    finally:
        repo.delete_job(job)
        repo.close()


def test_sigterm_with_queued_analyses_loses_none(service_factory, tmp_path):
    """A stopping service finishes the running analysis and leaves the queued ones to the
    next start: whichever way each went, every acknowledged analysis ends with a verdict."""
    hold = tmp_path / "hold"
    hold_analyses(hold, "run")
    svc = service_factory(env={HOLD: str(hold)}, extra_args=["--workers", "1"])
    logs = {job: svc.root / f"{job}.log" for job in ("run", "q1", "q2")}
    with svc.client() as c:
        for job, log in logs.items():
            log.write_text(CUDA)
            _terminal(c, log, job, 0)
    assert svc.proc is not None
    proc = svc.proc
    proc.terminate()
    release_analyses(hold, "run")  # the running analysis may end now; shutdown waits for it
    proc.wait(120)
    svc.proc = None
    svc.env = {}
    svc.start()
    with svc.client() as c:
        for job in logs:
            got = _verdict(c, job, 0, True)
            assert got["status"] == "completed", (job, got)
