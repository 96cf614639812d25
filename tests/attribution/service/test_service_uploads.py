"""A rejected upload loses nothing (issue 12, item 2), against the real `relaunch serve`.

Before the fix a chunked upload over `--max-upload-bytes` got 413 but had already
overwritten `cycle_N.log`, so the next re-decision replaced a correct verdict. Now an
upload goes to a temporary file in the same directory and replaces the stored log only
after every limit passed; a rejected one (too big, client gone) leaves the stored log,
the verdict and the history as they were.
"""

from __future__ import annotations

import httpx
import pytest

from tests._service_helpers import require_restart_agent

require_restart_agent()

pytestmark = pytest.mark.slow

LIMIT = 4096
GOOD = b"[rank0]: iteration 5 | lm loss 2.5\n[rank0]: ValueError: bad learning rate -1\n"
OTHER = b"[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
SICK = {"node": "node1", "healthy": False, "reason": "ib check failed"}


def _chunks(total: int, line: bytes = OTHER):
    sent = 0
    while sent < total:  # no Content-Length: the limit is counted as the body streams
        yield line
        sent += len(line)


@pytest.fixture
def svc(service_factory):
    return service_factory(extra_args=["--max-upload-bytes", str(LIMIT)])


def _stored(svc, job: str, cycle: int):
    return svc.workdir / "data" / "uploads" / job / f"cycle_{cycle}.log"


def test_rejected_uploads_keep_the_stored_log_and_verdict(svc):
    with svc.client() as c:
        ok = c.post("/v1/jobs/up/cycles/0/log", content=GOOD)
        assert ok.status_code == 200 and ok.json()["status"] == "completed", ok.text
        verdict = ok.json()["verdict"]
        stored = _stored(svc, "up", 0)
        assert stored.read_bytes() == GOOD
        for params in ({}, {"append": "true"}, {"append": "true", "final": "false"}):
            r = c.post("/v1/jobs/up/cycles/0/log", params=params, content=_chunks(3 * LIMIT))
            assert r.status_code == 413, r.text
            assert r.json()["error_code"] == "payload_too_large"
            assert stored.read_bytes() == GOOD, params
        declared = c.post("/v1/jobs/up/cycles/0/log", content=b"x" * (LIMIT + 1))
        assert declared.status_code == 413
        assert stored.read_bytes() == GOOD
        assert not [p.name for p in stored.parent.iterdir() if p.name != stored.name]
        # a later re-decision still reads the good log: same verdict
        nh = c.post("/v1/jobs/up/cycles/0/node-health", json=SICK)
        assert nh.status_code == 200, nh.text
        assert nh.json()["verdict"]["primary"] == verdict["primary"]
        assert c.get("/v1/jobs/up/cycles/0").json()["verdict"]["primary"] == verdict["primary"]


def test_rejected_first_upload_stores_nothing(svc):
    with svc.client() as c:
        r = c.post("/v1/jobs/fresh/cycles/3/log", content=_chunks(2 * LIMIT))
        assert r.status_code == 413, r.text
        assert c.get("/v1/jobs/fresh").status_code == 404  # no job, no cycle registered
        assert not _stored(svc, "fresh", 3).exists()


def test_client_gone_mid_upload_keeps_the_stored_log(svc):
    with svc.client() as c:
        assert c.post("/v1/jobs/gone/cycles/0/log", content=GOOD).status_code == 200

        def dies():
            yield OTHER
            raise RuntimeError("client crashed mid-upload")

        with pytest.raises((httpx.HTTPError, RuntimeError)):
            c.post("/v1/jobs/gone/cycles/0/log", content=dies())
    with svc.client() as c:
        assert c.get("/healthz").status_code == 200
        assert _stored(svc, "gone", 0).read_bytes() == GOOD


def test_rejected_fr_upload_keeps_stored_findings(svc):
    with svc.client() as c:
        assert c.post("/v1/jobs/fr/cycles/0/log", content=GOOD).status_code == 200
        before = c.get("/v1/jobs/fr/cycles/0").json()
        files = {"files": ("rank0.pkl", b"\x80" * (2 * LIMIT), "application/octet-stream")}
        r = c.post("/v1/jobs/fr/cycles/0/fr", files=files)
        assert r.status_code == 413, r.text
        after = c.get("/v1/jobs/fr/cycles/0").json()
        assert after["fr_findings"] == before["fr_findings"]
        assert after["verdict"] == before["verdict"]
