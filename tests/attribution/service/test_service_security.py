"""Bad input and hostile clients against the real service: every answer is a JSON error.

Path confinement (`..`, symlink escape, non-regular files, relative paths), bearer auth,
request size limits, malformed JSON, bad parameters, unknown job/cycle, rate limiting
(429 + Retry-After) and overload (503). After each attack the service still serves and
the stored history is intact.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests._service_helpers import require_restart_agent

require_restart_agent()

pytestmark = pytest.mark.slow

LOG = "[rank0]: iteration 5 | lm loss 2.5\n[rank0]: ValueError: bad learning rate -1\n"


def err(resp, status: int, code: str) -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error_code", "message"} and body["error_code"] == code, body
    assert body["message"]
    return body


@pytest.fixture
def svc(service_factory):
    return service_factory()


def post(c, path, **kw):
    return c.post("/logs", json={"log_path": path, **kw})


def test_path_confinement_attacks(svc, tmp_path: Path):
    root = svc.root
    good = root / "ok.log"
    good.write_text(LOG)
    outside = tmp_path / "secret.log"
    outside.write_text("TOKEN=hunter2\n")
    (root / "escape.log").symlink_to(outside)
    (root / "linkdir").symlink_to(tmp_path)
    (root / "adir").mkdir()
    os.mkfifo(root / "fifo.log")
    (root / "devnull").symlink_to("/dev/null")
    with svc.client() as c:
        err(post(c, str(root / ".." / "secret.log")), 400, "invalid_path")
        err(post(c, f"{root}/adir/../../secret.log"), 400, "invalid_path")
        err(post(c, "relative/path.log"), 400, "invalid_path")
        err(post(c, ""), 400, "invalid_path")
        err(post(c, str(root) + "/x\x00.log"), 400, "invalid_path")
        err(post(c, "/etc/passwd", analysis_intent="terminal"), 403, "outside_allowed_root")
        err(post(c, str(root) + "-sibling/a.log"), 403, "outside_allowed_root")
        err(
            post(c, str(root / "escape.log"), analysis_intent="terminal"),
            403,
            "outside_allowed_root",
        )
        err(post(c, str(root / "linkdir" / "secret.log")), 403, "outside_allowed_root")
        err(post(c, str(root / "adir"), analysis_intent="terminal"), 400, "not_regular_file")
        err(post(c, str(root / "fifo.log"), analysis_intent="terminal"), 400, "not_regular_file")
        err(post(c, str(root / "devnull"), analysis_intent="terminal"), 403, "outside_allowed_root")
        err(post(c, str(root / "missing.log"), analysis_intent="terminal"), 404, "not_found")
        err(c.get("/logs", params={"log_path": "/etc/shadow"}), 403, "outside_allowed_root")
        err(c.get("/logs", params={"log_path": str(root / "never.log")}), 404, "not_submitted")
        # the service is unharmed and still answers legitimate requests
        ok = post(c, str(good), job_id="j", cycle_id=0, analysis_intent="terminal")
        assert ok.status_code == 200
        assert c.get("/logs", params={"log_path": str(good)}).json()["status"] == "completed"


def test_unreadable_file_is_403(svc):
    if os.geteuid() == 0:
        pytest.skip("running as root: file permissions do not stop reads")
    f = svc.root / "locked.log"
    f.write_text(LOG)
    f.chmod(0)
    with svc.client() as c:
        err(post(c, str(f), analysis_intent="terminal"), 403, "unreadable")


def test_malformed_bodies_and_bad_parameters(svc):
    good = svc.root / "ok.log"
    good.write_text(LOG)
    with svc.client() as c:
        h = {"content-type": "application/json"}
        err(c.post("/logs", content=b"{not json", headers=h), 422, "malformed_request")
        err(c.post("/logs", content=b"[1, 2]", headers=h), 422, "malformed_request")
        err(c.post("/logs", json={"user": "x"}), 422, "malformed_request")  # no log_path
        err(c.post("/logs", content=b"\xff\xfe\x00", headers=h), 422, "malformed_request")
        err(post(c, str(good), cycle_id=True), 400, "invalid_parameter")
        err(post(c, str(good), cycle_id="3"), 400, "invalid_parameter")
        err(post(c, str(good), cycle_id=-1), 400, "invalid_parameter")
        err(post(c, str(good), cycle_id=2**40), 400, "invalid_parameter")
        err(post(c, str(good), analysis_intent="now"), 400, "invalid_parameter")
        err(post(c, str(good), job_id="../../etc"), 400, "invalid_parameter")
        err(post(c, str(good), job_id="x" * 300), 400, "invalid_parameter")
        err(post(c, 42), 400, "invalid_parameter")
        err(c.get("/logs"), 400, "invalid_parameter")
        err(
            c.get("/logs", params={"log_path": str(good), "wait": "maybe"}),
            400,
            "invalid_parameter",
        )
        err(c.get("/v1/jobs/j/cycles/notanint"), 400, "invalid_parameter")
        err(c.get("/v1/jobs/j/cycles/-3"), 400, "invalid_parameter")
        err(c.get("/v1/jobs/bad%20id"), 400, "invalid_parameter")
        err(c.get("/v1/jobs/unknown"), 404, "not_found")
        err(c.get("/v1/jobs/unknown/cycles/0/verdict"), 404, "not_found")
        err(c.get("/v1/nothing-here"), 404, "not_found")
        err(c.delete("/logs"), 405, "method_not_allowed")
        # history is intact and the service healthy after all of it
        assert c.get("/v1/jobs").json() == {"jobs": []}
        assert c.get("/healthz").json()["status"] == "ok"


def test_bearer_token(service_factory):
    svc = service_factory(token="s3cret-token")
    with svc.client(token=False) as anon:
        assert anon.get("/healthz").status_code == 200  # health stays open for probes
        err(anon.get("/v1/jobs"), 401, "unauthorized")
        err(anon.post("/logs", json={"log_path": "/x"}), 401, "unauthorized")
        assert anon.get("/v1/jobs").headers["www-authenticate"] == "Bearer"
    with svc.client(token="wrong") as bad:
        err(bad.get("/v1/jobs"), 401, "unauthorized")
    with svc.client(token="s3cret-token-and-more") as longer:
        err(longer.get("/v1/jobs"), 401, "unauthorized")
    with svc.client() as good:
        assert good.get("/v1/jobs").status_code == 200
    assert "s3cret-token" not in svc.output()


def test_request_size_limits(service_factory):
    svc = service_factory(extra_args=["--max-body-bytes", "2048", "--max-upload-bytes", "65536"])
    with svc.client() as c:
        big = {"log_path": "/x", "user": "u" * 5000}
        err(c.post("/logs", json=big), 413, "payload_too_large")

        def chunks():
            for _ in range(10):
                yield b"a" * 1024  # no Content-Length: counted as it streams

        err(
            c.post("/logs", content=chunks(), headers={"content-type": "application/json"}),
            413,
            "payload_too_large",
        )
        err(c.post("/v1/jobs/u/cycles/0/log", content=b"x" * 70_000), 413, "payload_too_large")
        ok = c.post("/v1/jobs/u/cycles/0/log", content=LOG.encode())
        assert ok.status_code == 200 and ok.json()["status"] == "completed"


def test_rate_limit_answers_429_with_retry_after(service_factory):
    svc = service_factory(extra_args=["--rate-limit", "1", "--rate-burst", "3"])
    with svc.client() as c:
        codes = [c.get("/v1/jobs") for _ in range(6)]
        limited = [r for r in codes if r.status_code == 429]
        assert [r.status_code for r in codes[:3]] == [200, 200, 200]
        assert limited, [r.status_code for r in codes]
        body = err(limited[0], 429, "rate_limited")
        assert body["message"]
        assert int(limited[0].headers["retry-after"]) >= 1
        assert c.get("/healthz").status_code == 200  # never rate limited


def test_overload_answers_503(service_factory):
    svc = service_factory(extra_args=["--max-pending", "1", "--workers", "1"])
    big = svc.root / "big.log"
    with open(big, "w") as fh:
        for i in range(300_000):
            fh.write(f"[rank{i % 64}]: iteration {i} | consumed samples {i * 64} | loss 1.5\n")
    small = svc.root / "small.log"
    small.write_text(LOG)
    with svc.client() as c:
        first = post(c, str(big), job_id="big", cycle_id=0, analysis_intent="terminal")
        assert first.status_code == 200
        second = post(c, str(small), job_id="small", cycle_id=0, analysis_intent="terminal")
        err(second, 503, "overloaded")
        assert second.headers["retry-after"] == "1"
        assert c.get("/logs", params={"log_path": str(big)}).json()["status"] == "completed"
        # once the queue drained the same request is accepted
        assert (
            post(c, str(small), job_id="small", cycle_id=0, analysis_intent="terminal").status_code
            == 200
        )


def test_random_garbage_never_crashes_or_corrupts(svc):
    import random

    good = svc.root / "keep.log"
    good.write_text(LOG)
    rng = random.Random(3)
    with svc.client() as c:
        c.post(
            "/logs",
            json={
                "log_path": str(good),
                "job_id": "keep",
                "cycle_id": 0,
                "analysis_intent": "terminal",
            },
        )
        before = c.get("/logs", params={"log_path": str(good)}).json()["result"]
        targets = [
            "/logs",
            "/v1/jobs/keep/cycles/0/log",
            "/v1/jobs/keep/cycles/0/fr",
            "/v1/jobs/keep",
            "/v1/search",
            "/v1/jobs/keep/cycles/0/verdict",
        ]
        statuses = set()
        for _ in range(120):
            target = rng.choice(targets)
            body = rng.randbytes(rng.randrange(0, 400))
            method = rng.choice(["GET", "POST", "PUT"])
            ctype = rng.choice(
                ["application/json", "multipart/form-data; boundary=x", "text/plain"]
            )
            if target.endswith("/log") and method == "POST":
                target = "/v1/jobs/other/cycles/0/log"  # uploads are valid input; keep apart
            r = c.request(
                method,
                target,
                content=body,
                headers={"content-type": ctype},
                params={"log_path": body[:20].decode("latin-1"), "wait": "false"},
            )
            statuses.add(r.status_code)
            assert r.status_code < 500, (method, target, r.text)
            assert r.headers["content-type"].startswith("application/json")
        assert c.get("/healthz").json()["status"] == "ok"
        after = c.get("/v1/jobs/keep/cycles/0").json()
    assert after["verdict"] == {k: v for k, v in before.items() if k not in ("module", "state")}
    # 409: a second, different upload to the cycle 'other' already analysed (append-only)
    assert statuses - {200} and statuses <= {200, 400, 404, 405, 409, 413, 422}


def test_dashboard_needs_the_token_unless_dashboard_public(service_factory):
    closed = service_factory(token="s3cret-token")
    with closed.client(token=False) as anon:
        err(anon.get("/"), 401, "unauthorized")
        err(anon.get("/search"), 401, "unauthorized")
    opened = service_factory(token="s3cret-token", extra_args=["--dashboard-public"])
    with opened.client(token=False) as anon:
        assert anon.get("/").status_code == 200
        assert anon.get("/search").status_code == 200
        assert anon.get("/jobs/nope").status_code == 404  # the page's own answer, not 401
        # the API, NVRx /logs and any write stay behind the token
        err(anon.get("/v1/jobs"), 401, "unauthorized")
        err(anon.get("/logs", params={"log_path": "/x"}), 401, "unauthorized")
        err(anon.post("/jobs/x", json={}), 401, "unauthorized")
        err(anon.get("/jobsx"), 401, "unauthorized")
        # whole cycle logs may hold secrets: never public
        for raw in ("log", "log.txt", "log/tail"):
            err(anon.get(f"/jobs/x/cycles/0/{raw}"), 401, "unauthorized")
    with opened.client() as good:
        assert good.get("/v1/jobs").status_code == 200


def test_every_dashboard_route_is_covered_by_the_public_read_rule():
    from relaunch.attribution.service.limits import is_dashboard_read
    from relaunch.web.routes import create_router

    for route in create_router(lambda: None).routes:
        concrete = route.path.replace("{job_id:path}", "j/1").replace("{cycle}", "0")
        concrete = concrete.replace("{name}", "style.css")
        for method in route.methods:
            raw_log = concrete.endswith(("/log", "/log.txt", "/log/tail"))
            assert is_dashboard_read(method, concrete) is not raw_log, (method, route.path)
    assert not is_dashboard_read("POST", "/jobs/j")
    assert not is_dashboard_read("GET", "/v1/jobs")
