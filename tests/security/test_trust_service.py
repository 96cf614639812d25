"""Trust boundaries of the real `relaunch serve` (issue 26, items 4-6 and 11).

What each hostile request gets, against a real service on 127.0.0.1 and its SQLite file:
- a cross-site write (text/plain, no Content-Type, a foreign Origin, Sec-Fetch-Site:
  cross-site): 403 `cross_site_refused`, the stored log and verdict unchanged; NVRx's
  JSON POST /logs, an octet-stream upload and `X-Relaunch-Client` pass;
- a foreign Host header (DNS rebinding): 421 `host_not_allowed`; 127.0.0.1 and localhost pass;
- headers that never end: the connection is closed after --header-timeout; a body that
  stops: 408 after --body-timeout;
- a different upload for a cycle with a verdict: 409 `conflict` (the same bytes again:
  200); appends past --max-upload-bytes: 413; an append to a decided cycle: 409;
- the database file deleted under the service: writes and /healthz answer 503
  `storage_unavailable`, and every write acknowledged before is still there after a
  restart (0 acknowledged writes lost).
"""

from __future__ import annotations

import json
import os
import socket

import pytest

from tests._service_helpers import require_restart_agent

require_restart_agent()

LIMIT = 4096
GOOD = b"[rank0]: iteration 5 | lm loss 2.5\n[rank0]: ValueError: bad learning rate -1\n"
OTHER = b"[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
OCTET = {"Content-Type": "application/octet-stream"}


def _raw(port: int, request: bytes, *, wait_s: float = 60.0) -> bytes:
    """Send raw bytes; everything the server answers until it closes (or wait_s)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as s:
        s.sendall(request)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_cross_site_writes_and_foreign_hosts_are_refused(service_factory) -> None:
    svc = service_factory(extra_args=["--max-upload-bytes", str(LIMIT)])
    log = svc.root / "cycle_0.log"
    log.write_bytes(GOOD)
    bare = {"X-Relaunch-Client": ""}  # this test's client does not say it is one
    with svc.client(headers=bare) as c:
        url = "/v1/jobs/cs/cycles/0/log"
        assert c.post(url, content=GOOD, headers=OCTET).status_code == 200
        before = c.get(url.replace("/log", "/verdict")).json()
        attacks = [
            c.post(url, content=OTHER, headers={"Content-Type": "text/plain"}),
            c.post(url, content=OTHER),  # a Blob without a type: no Content-Type at all
            c.post(url, content=OTHER, headers={**OCTET, "Origin": "http://evil.example"}),
            c.post(url, content=OTHER, headers={**OCTET, "Sec-Fetch-Site": "cross-site"}),
            c.post(
                "/logs",
                content=json.dumps({"log_path": str(log), "job_id": "x", "cycle_id": 0}),
                headers={"Content-Type": "text/plain;charset=UTF-8"},
            ),
            c.post(
                "/v1/jobs/cs/end",
                content=b'{"state":"succeeded","exit_code":0}',
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            ),
        ]
        for r in attacks:
            assert r.status_code == 403, r.text
            assert r.json()["error_code"] == "cross_site_refused"
            assert "\n" not in r.json()["message"]
        assert c.get(url.replace("/log", "/verdict")).json() == before
        assert c.get("/v1/jobs/cs").json()["state"] != "succeeded"
        # what non-browser clients send passes: NVRx's JSON, X-Relaunch-Client
        ok = c.post("/logs", json={"log_path": str(log), "job_id": "nv", "cycle_id": 0})
        assert ok.status_code == 200, ok.text
        assert c.post("/logs", json={"log_path": str(log), "job_id": "nv", "cycle_id": 0,
                                     "analysis_intent": "terminal"}).status_code == 200  # fmt: skip
        assert (
            c.post("/v1/jobs/cs2/cycles/0/log", content=GOOD, headers={"X-Relaunch-Client": "1"})
        ).status_code == 200
        for host, status in (("evil.example", 421), ("localhost", 200), ("127.0.0.1", 200)):
            r = c.get("/healthz", headers={"Host": f"{host}:{svc.port}"})
            assert r.status_code == status, (host, r.text)
        assert c.get("/v1/jobs", headers={"Host": "rebind.attacker"}).json()["error_code"] == (
            "host_not_allowed"
        )


def test_slow_headers_are_cut_and_slow_bodies_get_408(service_factory) -> None:
    svc = service_factory(extra_args=["--header-timeout", "1", "--body-timeout", "1"])
    assert svc.port is not None
    # headers that never end: the server closes the connection (no answer, no hang)
    assert _raw(svc.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1") == b""
    # a body that stops after 10 of 100 bytes: 408
    out = _raw(
        svc.port,
        b"POST /v1/jobs/slow/cycles/0/log HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/octet-stream\r\nContent-Length: 100\r\n\r\n0123456789",
    )
    assert out.startswith(b"HTTP/1.1 408 "), out[:200]
    assert b'"request_timeout"' in out
    with svc.client() as c:  # the service still serves
        assert c.get("/healthz").json()["status"] == "ok"


def test_history_is_append_only(service_factory) -> None:
    svc = service_factory(extra_args=["--max-upload-bytes", str(LIMIT)])
    with svc.client() as c:
        url = "/v1/jobs/ao/cycles/0/log"
        first = c.post(url, content=GOOD, headers=OCTET)
        assert first.status_code == 200 and first.json()["status"] == "completed"
        verdict = c.get("/v1/jobs/ao/cycles/0/verdict").json()
        again = c.post(url, content=GOOD, headers=OCTET)  # the same log again: a retry
        assert again.status_code == 200, again.text
        other = c.post(url, content=OTHER, headers=OCTET)
        assert other.status_code == 409 and other.json()["error_code"] == "conflict", other.text
        appended = c.post(url, params={"append": "true"}, content=OTHER, headers=OCTET)
        assert appended.status_code == 409, appended.text
        assert c.get("/v1/jobs/ao/cycles/0/verdict").json() == verdict
        stored = svc.workdir / "data" / "uploads" / "ao" / "cycle_0.log"
        assert stored.read_bytes() == GOOD
        # appends honour the limit: 21 pieces of 400 bytes under a 4 KB limit
        piece = b"x" * 399 + b"\n"
        codes = [
            c.post(
                "/v1/jobs/ap/cycles/0/log",
                params={"append": "true", "final": "false"},
                content=piece,
                headers=OCTET,
            ).status_code
            for _ in range(21)
        ]
        assert codes == [200] * 10 + [413] * 11, codes
        assert (svc.workdir / "data" / "uploads" / "ap" / "cycle_0.log").stat().st_size == 4000


@pytest.mark.slow
def test_database_deleted_under_the_service_turns_writes_into_503(service_factory) -> None:
    svc = service_factory()
    db = svc.workdir / "relaunch.db"
    with svc.client() as c:
        for cycle in range(5):
            r = c.post(f"/v1/jobs/db/cycles/{cycle}/log", content=GOOD, headers=OCTET)
            assert r.status_code == 200 and r.json()["verdict"] is not None
        for path in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
            if path.exists():
                os.unlink(path)
        answers = [
            c.post(f"/v1/jobs/db/cycles/{cycle}/log", content=GOOD, headers=OCTET)
            for cycle in range(5, 15)
        ]
        acknowledged = [n for n, r in zip(range(5, 15), answers, strict=True) if r.is_success]
        for r in answers:
            assert r.status_code == 503, r.text
            assert r.json()["error_code"] == "storage_unavailable"
            assert "deleted" in r.json()["message"]
        health = c.get("/healthz")
        assert health.status_code == 503 and health.json()["status"] == "fail"
        r = c.post("/logs", json={"log_path": str(svc.root / "x.log"), "job_id": "db2"})
        assert r.status_code == 503, r.text
    svc.restart()  # a fresh database file: whatever was acknowledged must be in it
    with svc.client() as c:
        lost = [n for n in acknowledged if c.get(f"/v1/jobs/db/cycles/{n}/verdict").is_error]
        assert acknowledged == [] and lost == []
        assert c.get("/healthz").json()["status"] == "ok"
