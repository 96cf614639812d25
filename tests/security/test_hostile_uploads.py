"""Seeded, bounded fuzz of the upload routes against the real `relaunch serve` (issue 12).

Hundreds of generated requests to `POST /v1/jobs/{job}/cycles/{n}/log` and `/fr`: random,
binary, truncated and over-limit bodies; odd chunkings; traversal, empty, huge and
non-ASCII job ids, cycle numbers and dump file names; bad query values; declared sizes far
over the limit and bodies cut off mid-way (raw sockets). Every answer must be a 2xx whose
body carries the verdict (or says it is pending) or a 4xx JSON error with a one-line
message: never a 500, never a connection reset. After a rejected request the cycle it
named is exactly as before (record and stored log), and the service stays healthy.
"""

from __future__ import annotations

import json
import random
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from relaunch.attribution.core.files import safe_name
from tests._service_helpers import require_restart_agent

require_restart_agent()

pytestmark = pytest.mark.slow

SEED = 20261203
CASES = 320
LIMIT = 64 << 10
GOOD = (
    b"[rank0]: iteration 5 | lm loss 2.5\n"
    b"[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
)
JOBS = [
    "keep",
    "fz",
    "a.b-c_d",
    "../../etc",
    "..",
    "%2e%2e%2fx",
    "a b",
    "\u00e9t\u00e9",
    "x" * 300,
    "-lead",
    "j:1@2+3=4",
]
CYCLES = ["0", "1", "7", "-1", "99999999999999999999", "1e3", "0x10", "2147483647", "%20"]
NAMES = [
    "rank0.pkl",
    "../../etc/passwd",
    "",
    "....",
    "a/b/rank1",
    "rank\x002",
    "x" * 500,
    "\u202erank3",
    ".hidden_5",
    "C:\\win\\rank6",
]
FLAGS = ["true", "false", "maybe", "1", ""]


def _body(rng: random.Random) -> bytes:
    kind = rng.randrange(7)
    if kind == 0:
        return b""
    if kind == 1:
        return rng.randbytes(rng.randrange(1, 4096))
    if kind == 2:
        return GOOD[: rng.randrange(len(GOOD))]  # truncated mid-line
    if kind == 3:
        return GOOD * rng.randrange(1, 50)
    if kind == 4:
        return b"[rank1]: " + b"A" * rng.randrange(LIMIT // 2, LIMIT + 4096)  # no newline
    if kind == 5:
        return b"\x00\xff" * rng.randrange(1, 2000) + GOOD
    return GOOD.decode().encode("utf-16")


def _chunked(data: bytes, rng: random.Random) -> Iterator[bytes]:
    i = 0
    while i < len(data):
        n = rng.choice([1, 2, 7, 100, 4096, 65536])
        yield data[i : i + n]
        i += n


def _url(job: str, cycle: str) -> str:
    return f"/v1/jobs/{quote(job, safe='')}/cycles/{cycle}"


def _snapshot(c: httpx.Client, svc: Any, job: str, cycle: str) -> tuple[int, str, bytes | None]:
    """The cycle's record as the API shows it, and its stored upload's bytes."""
    r = c.get(_url(job, cycle))
    stored = svc.workdir / "data" / "uploads" / safe_name(job) / f"cycle_{cycle}.log"
    try:
        data = stored.read_bytes()
    except OSError:
        data = None
    return r.status_code, r.text, data


def _check(r: httpx.Response, case: str) -> None:
    assert r.status_code < 500, (case, r.status_code, r.text)
    assert r.headers.get("content-type", "").startswith("application/json"), (case, r.text)
    body = r.json()
    if r.status_code >= 400:
        assert set(body) == {"error_code", "message"}, (case, body)
        assert body["message"] and "\n" not in body["message"], (case, body)
    elif "findings" in body:  # FR dumps taken
        assert isinstance(body["findings"], dict), (case, body)
    else:
        assert body["status"] in ("pending", "completed"), (case, body)
        if body["status"] == "completed":
            assert body["verdict"]["decision"] in ("STOP", "RESTART"), (case, body)


def _raw(svc: Any, head: bytes, body: bytes, close_early: bool) -> bytes:
    """Send a request on a raw socket; return what came back (b"" when cut off)."""
    with socket.create_connection(("127.0.0.1", svc.port), timeout=60) as s:
        s.sendall(head + body)
        if close_early:
            s.shutdown(socket.SHUT_WR)  # the body ends before its declared length
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_fuzzed_uploads_get_a_verdict_or_a_one_line_4xx(service_factory):
    svc = service_factory(extra_args=["--max-upload-bytes", str(LIMIT), "--rate-limit", "0"])
    rng = random.Random(SEED)
    statuses: dict[int, int] = {}
    with svc.client(timeout=120) as c:
        first = c.post("/v1/jobs/keep/cycles/0/log", content=GOOD)
        assert first.status_code == 200
        for n in range(CASES):
            job, cycle = rng.choice(JOBS), rng.choice(CYCLES)
            if rng.random() < 0.3:
                job, cycle = "keep", "0"
            url = _url(job, cycle)
            before = _snapshot(c, svc, job, cycle)
            if rng.random() < 0.75:
                params = {
                    k: rng.choice(FLAGS) for k in ("append", "final", "wait") if rng.random() < 0.4
                }
                data = _body(rng)
                if rng.random() < 0.15:
                    data += rng.randbytes(LIMIT)  # over the limit
                content: Any = _chunked(data, rng) if rng.random() < 0.5 else data
                r = c.post(url + "/log", params=params, content=content)
                case = f"#{n} log {job!r}/{cycle} {params} {len(data)}B"
            else:
                files = [
                    ("files", (rng.choice(NAMES), _body(rng), "application/octet-stream"))
                    for _ in range(rng.randrange(0, 4))
                ]
                if not files or rng.random() < 0.2:
                    r = c.post(
                        url + "/fr",
                        content=rng.randbytes(200),
                        headers={"content-type": "multipart/form-data; boundary=zz"},
                    )
                else:
                    r = c.post(url + "/fr", files=files)
                case = f"#{n} fr {job!r}/{cycle} {[f[1][0] for f in files]}"
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            _check(r, case)
            if r.status_code >= 400:
                assert _snapshot(c, svc, job, cycle) == before, case
            elif r.json().get("status") == "pending":  # let its analysis end: a stable record
                c.get(url + "/verdict", params={"wait": "true"})
        keep_before = _snapshot(c, svc, "keep", "0")
        # declared sizes far over the limit, and bodies cut off before their declared end
        for _ in range(40):
            declared = rng.choice([LIMIT + 1, 10**9, 10**15, 2**63])
            body = rng.randbytes(rng.randrange(0, 2048))
            close_early = rng.random() < 0.5
            if close_early:
                declared = len(body) + rng.randrange(1, 1000)
            head = (
                f"POST /v1/jobs/keep/cycles/0/log HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                "Content-Type: application/octet-stream\r\n"  # the Host and cross-site guards
                f"Content-Length: {declared}\r\nConnection: close\r\n\r\n"
            ).encode()
            out = _raw(svc, head, body, close_early)
            if not close_early:
                assert out.startswith(b"HTTP/1.1 413 "), out[:200]
                body_out = json.loads(out.split(b"\r\n\r\n", 1)[1])
                assert body_out["error_code"] == "payload_too_large", out
        assert _snapshot(c, svc, "keep", "0") == keep_before  # all of those were refused
        assert c.get("/healthz").json()["status"] == "ok"
    assert "Traceback" not in svc.output(), svc.output()[-3000:]
    assert statuses.get(200) and statuses.get(413) and statuses.get(400), statuses
