"""Reads of client-named logs stay inside `--allowed-root` even when the disk changes
after registration (issue 12, item 1), against the real `relaunch serve`.

The attack: register a log whose directory does not exist yet (or existed and was
analysed), then make that directory a symlink to a place outside the root and trigger a
re-analysis (node-health report, FR upload, terminal). Before the fix the outside file's
content ended up in the stored verdict. Also: a FIFO swapped in for an analysed log must
not block the re-analysis nor the service's shutdown.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests._service_helpers import require_restart_agent

require_restart_agent()

pytestmark = pytest.mark.slow

SECRET = "SECRET-OUTSIDE-7f3a"
OUTSIDE_LOG = f"[rank0]: RuntimeError: {SECRET} CUDA error: an illegal memory access\n"
GOOD_LOG = "[rank0]: iteration 5 | lm loss 2.5\n[rank0]: ValueError: bad learning rate -1\n"
SICK = {"node": "node1", "healthy": False, "reason": "ib check failed"}


def _outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "cycle_0.log").write_text(OUTSIDE_LOG)
    return out


def _no_secret(c, job: str) -> None:
    for cyc in c.get(f"/v1/jobs/{job}/cycles").json()["cycles"]:
        full = c.get(f"/v1/jobs/{job}/cycles/{cyc['cycle']}").text
        assert SECRET not in full, full


def test_directory_swapped_for_symlink_before_first_analysis(service_factory, tmp_path):
    svc = service_factory()
    outside = _outside(tmp_path)
    log = svc.root / "late" / "cycle_0.log"
    with svc.client() as c:
        r = c.post("/logs", json={"log_path": str(log), "job_id": "race", "cycle_id": 0})
        assert r.status_code == 200, r.text  # track_only: the file need not exist yet
        (svc.root / "late").symlink_to(outside, target_is_directory=True)
        nh = c.post("/v1/jobs/race/cycles/0/node-health", json=SICK)
        assert nh.status_code == 200, nh.text
        assert nh.json()["verdict"] is None
        got = c.get("/logs", params={"log_path": str(log), "wait": "true"})
        assert got.status_code == 403 and got.json()["error_code"] == "outside_allowed_root"
        v = c.get("/v1/jobs/race/cycles/0/verdict", params={"wait": "true"}).json()
        assert v["verdict"] is None
        _no_secret(c, "race")
        assert c.get("/healthz").json()["status"] == "ok"


def test_directory_swapped_after_analysis_keeps_the_verdict(service_factory, tmp_path):
    svc = service_factory()
    outside = _outside(tmp_path)
    d = svc.root / "jobdir"
    d.mkdir()
    log = d / "cycle_0.log"
    log.write_text(GOOD_LOG)
    with svc.client() as c:
        body = {
            "log_path": str(log),
            "job_id": "swap",
            "cycle_id": 0,
            "analysis_intent": "terminal",
        }
        assert c.post("/logs", json=body).status_code == 200
        before = c.get("/logs", params={"log_path": str(log)}).json()["result"]
        assert before["decision"] in ("STOP", "RESTART")
        d.rename(svc.root / "jobdir.orig")
        d.symlink_to(outside, target_is_directory=True)
        nh = c.post("/v1/jobs/swap/cycles/0/node-health", json=SICK)
        assert nh.status_code == 200, nh.text
        assert nh.json()["verdict"] is None  # the log is no longer reachable inside the root
        files = {"files": ("rank0.pkl", b"not a pickle", "application/octet-stream")}
        fr = c.post("/v1/jobs/swap/cycles/0/fr", files=files)
        assert fr.status_code in (200, 400), fr.text
        after = c.get("/v1/jobs/swap/cycles/0").json()
        assert after["verdict"]["rule"] == before["rule"]
        assert after["verdict"]["primary"] == before["primary"]
        _no_secret(c, "swap")


def test_file_swapped_for_symlink_or_fifo_never_read_or_blocks(service_factory, tmp_path):
    svc = service_factory()
    outside = _outside(tmp_path)
    log = svc.root / "f.log"
    log.write_text(GOOD_LOG)
    with svc.client() as c:
        body = {
            "log_path": str(log),
            "job_id": "fifo",
            "cycle_id": 0,
            "analysis_intent": "terminal",
        }
        assert c.post("/logs", json=body).status_code == 200
        before = c.get("/logs", params={"log_path": str(log)}).json()["result"]
        log.unlink()
        log.symlink_to(outside / "cycle_0.log")
        assert c.post("/v1/jobs/fifo/cycles/0/node-health", json=SICK).json()["verdict"] is None
        log.unlink()
        os.mkfifo(log)  # nobody ever writes: a blocking open or read would hang forever
        nh = c.post("/v1/jobs/fifo/cycles/0/node-health", json={**SICK, "node": "node2"})
        assert nh.status_code == 200, nh.text
        assert nh.json()["verdict"] is None
        after = c.get("/v1/jobs/fifo/cycles/0").json()
        assert after["verdict"]["rule"] == before["rule"]
        _no_secret(c, "fifo")
    proc = svc.proc
    assert proc is not None
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)  # shutdown is not held by the FIFO (a hang fails here)
    assert "Traceback" not in svc.output(), svc.output()


def test_open_confined_refuses_every_escape(tmp_path):
    from relaunch.attribution.service.confined import open_confined
    from relaunch.attribution.service.errors import ApiError

    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "ok.log").write_text("ok\n")
    outside = _outside(tmp_path)
    (root / "link").symlink_to(outside, target_is_directory=True)
    (root / "a" / "leaf.log").symlink_to(outside / "cycle_0.log")
    (root / "a" / "inner.log").symlink_to(root / "a" / "b" / "ok.log")  # even inside
    os.mkfifo(root / "a" / "pipe")
    roots = [root]
    fd = open_confined(root / "a" / "b" / "ok.log", roots)
    assert os.read(fd, 10) == b"ok\n"
    os.close(fd)
    cases = {
        root / "link" / "cycle_0.log": "outside_allowed_root",
        root / "a" / "leaf.log": "outside_allowed_root",
        root / "a" / "inner.log": "outside_allowed_root",
        outside / "cycle_0.log": "outside_allowed_root",
        root / "a" / "pipe": "not_regular_file",
        root / "a" / "b": "not_regular_file",
        root / "a" / "missing.log": "not_found",
        root / "a" / "b" / "ok.log" / "x": "outside_allowed_root",
    }
    for path, code in cases.items():
        with pytest.raises(ApiError) as exc:
            open_confined(path, roots)
        assert exc.value.error_code == code, (path, exc.value.message)
