"""`relaunch run` against a real `relaunch serve` (NVRx-compatible /logs) over TCP and a Unix socket."""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests._launcher_helpers import (
    REPO,
    WORKER,
    cycle_logs,
    engine_available,
    job_args,
    relaunch_env,
    run_relaunch,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _serve(tmp_path: Path, kind: str, extra: tuple[str, ...] = ()) -> Iterator[str]:
    """A real `relaunch serve` over TCP (`kind` "http") or a Unix socket; yields its endpoint."""
    why = engine_available()
    if why:
        pytest.skip(why)
    (tmp_path / "logs").mkdir(exist_ok=True)
    args = [
        sys.executable,
        "-m",
        "relaunch.cli",
        "serve",
        "--db",
        f"sqlite:///{tmp_path / 'service.db'}",
        "--allowed-root",
        str(tmp_path / "logs"),
        *extra,
    ]
    if kind == "http":
        port = _free_port()
        args += ["--port", str(port)]
        endpoint = f"http://127.0.0.1:{port}"
        client = httpx.Client(base_url=endpoint, timeout=2)
    else:
        sock = tmp_path / "svc.sock"
        args += ["--uds", str(sock)]
        endpoint = f"unix://{sock}"
        client = httpx.Client(
            transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://svc", timeout=2
        )
    proc = subprocess.Popen(
        args,
        cwd=REPO,
        env=relaunch_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:  # /healthz needs no token
                if client.get("/healthz").status_code in (200, 503):
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"relaunch serve did not come up: {proc.stdout.read() if proc.stdout else ''}"
                )
            time.sleep(0.2)
        yield endpoint
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(params=["http", "unix"])
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with _serve(tmp_path, request.param) as endpoint:
        yield endpoint


def test_bug_stopped_by_service_verdict(tmp_path: Path, service: str) -> None:
    r = run_relaunch(
        tmp_path,
        job_args(
            tmp_path,
            "svc",
            "--max-restarts",
            "8",
            "--ft-attribution-endpoint",
            service,
            "--ft-attribution-stop-action",
            "no-restart",
        )
        + [str(WORKER), "--mode", "bug"],
    )
    assert r.returncode == 3, r.stderr
    decisions = re.findall(r"relaunch: verdict cycle=(\d+) decision=(\w+)", r.stderr)
    assert decisions[:2] == [("0", "RESTART"), ("1", "STOP")], r.stderr
    assert "source=http:" in r.stderr
    # the STOP ended the job before its budget (9 cycles) was spent; how many cycles ran
    # before the verdict arrived depends on the machine's load, so no tighter bound
    assert len(cycle_logs(tmp_path, "svc")) < 9


def test_unhealthy_node_report_reaches_the_service_verdict(tmp_path: Path, service: str) -> None:
    """Cycle 0 crashes, the node then fails its health check: the launcher sends the report
    to the service with cycle 0, whose verdict records it."""
    from tests._health_helpers import start_health_service

    with start_health_service("fail_after_first") as endpoint:
        r = run_relaunch(
            tmp_path,
            job_args(
                tmp_path,
                "svcnh",
                "--ft-attribution-endpoint",
                service,
                "--ft-node-health-check-endpoint",
                endpoint,
                "--ft-node-health-check-interval",  # the preflight's path only
                "0",
            )
            + [str(WORKER), "--mode", "crash_once"],
        )
    assert r.returncode == 4, r.stderr
    if service.startswith("unix://"):
        client = httpx.Client(
            transport=httpx.HTTPTransport(uds=service[len("unix://") :]), base_url="http://svc"
        )
    else:
        client = httpx.Client(base_url=service)
    with client:
        cyc = client.get("/v1/jobs/svcnh/cycles/0").json()
    host = socket.gethostname()
    assert cyc["node_health"][host]["healthy"] is False
    assert [n["node"] for n in cyc["verdict"]["node_health"]] == [host]
    assert f"Node {host} failed its health check and is left out of cycle 1" in cyc["basis"]
    assert re.search(r"verdict cycle=0 decision=RESTART .*left out of cycle 1", r.stderr)


def _client(service: str) -> httpx.Client:
    if service.startswith("unix://"):
        return httpx.Client(
            transport=httpx.HTTPTransport(uds=service[len("unix://") :]), base_url="http://svc"
        )
    return httpx.Client(base_url=service)


def test_job_end_reaches_the_service(tmp_path: Path, service: str) -> None:
    """Through the HTTP client a finished job is recorded as it ended: cycle 0 failed
    (and analysed), cycle 1 succeeded, the job succeeded with exit code 0."""
    r = run_relaunch(
        tmp_path,
        job_args(tmp_path, "svcend", "--ft-attribution-endpoint", service)
        + [str(WORKER), "--mode", "crash_once"],
    )
    assert r.returncode == 0, r.stderr
    with _client(service) as client:
        job = client.get("/v1/jobs/svcend").json()
    assert (job["state"], job["exit_code"]) == ("succeeded", 0), job
    cycles = {c["cycle"]: c for c in job["cycle_list"]}
    assert sorted(cycles) == [0, 1]
    assert cycles[1]["status"] == "ended", cycles[1]


def test_end_routes_reject_bad_input(tmp_path: Path, service: str) -> None:
    """Bad ends are a 4xx in the error model and store nothing."""
    with _client(service) as client:
        bad = [
            ("/v1/jobs/j/end", {"state": "running", "exit_code": 0}),
            ("/v1/jobs/j/end", {"state": "failed", "exit_code": "1"}),
            ("/v1/jobs/j/end", {"state": "failed", "exit_code": 300}),
            ("/v1/jobs/j/end", {"state": "failed", "exit_code": 1, "extra": 1}),
            ("/v1/jobs/j/cycles/0/end", {"outcome": "exploded"}),
            ("/v1/jobs/j/cycles/-1/end", {"outcome": "failed"}),
            ("/v1/jobs/%2E%2E/end", {"state": "failed", "exit_code": 1}),
        ]
        for path, body in bad:
            resp = client.post(path, json=body)
            assert 400 <= resp.status_code < 500, (path, body, resp.text)
            assert set(resp.json()) == {"error_code", "message"}, resp.text
            if "running" in body.values() or "exploded" in body.values():  # plain words
                assert "one of succeeded, failed, stopped, interrupted" in resp.text, resp.text
        assert client.get("/v1/jobs").json()["jobs"] == []
        ok = client.post("/v1/jobs/j/cycles/0/end", json={"outcome": "failed", "reason": "x"})
        assert ok.status_code == 200, ok.text
        ok = client.post("/v1/jobs/j/end", json={"state": "failed", "exit_code": 1})
        assert ok.status_code == 200, ok.text
        job = client.get("/v1/jobs/j").json()
    assert (job["state"], job["exit_code"]) == ("failed", 1)
    assert job["cycle_list"][0]["status"] == "ended"


def test_token_protected_service_gets_the_launchers_token(tmp_path: Path) -> None:
    """`relaunch serve --token-file`: the launcher sends `--ft-attribution-token-file`'s
    token, so the job is recorded and its verdict stops the bug; an unusable token file is
    a one-line error before any worker."""
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    with _serve(tmp_path, "http", ("--token-file", str(token))) as service:
        bad = run_relaunch(
            tmp_path,
            job_args(tmp_path, "tokbad", "--ft-attribution-endpoint", service)
            + ["--ft-attribution-token-file", str(tmp_path / "missing"), str(WORKER)],
        )
        assert bad.returncode == 2 and "--ft-attribution-token-file" in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        r = run_relaunch(
            tmp_path,
            job_args(
                tmp_path,
                "tok",
                "--max-restarts",
                "4",
                "--ft-attribution-endpoint",
                service,
                "--ft-attribution-token-file",
                str(token),
                "--ft-attribution-stop-action",
                "no-restart",
            )
            + [str(WORKER), "--mode", "bug"],
        )
        assert r.returncode == 3, r.stderr
        with httpx.Client(base_url=service, timeout=5) as anon:
            assert anon.get("/v1/jobs/tok").status_code == 401
        with httpx.Client(
            base_url=service, timeout=5, headers={"Authorization": "Bearer s3cret-token"}
        ) as client:
            job = client.get("/v1/jobs/tok").json()
    assert job["state"] == "stopped", job
    assert [c["cycle"] for c in job["cycle_list"]][:2] == [0, 1]
