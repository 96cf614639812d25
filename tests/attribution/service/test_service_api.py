"""The real `relaunch serve` over HTTP (TCP and Unix socket): NVRx /logs, /v1, history.

Each test starts the service as a subprocess (tests/_service_helpers.py) with its own
SQLite file and allowed root, and talks to it only over HTTP.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests._service_helpers import (
    REPO_ROOT,
    cli_env,
    require_restart_agent,
)

require_restart_agent()

pytestmark = pytest.mark.slow

HEAD = [
    "[rank0]: iteration 10/100 | consumed samples 640 | lm loss 3.21",
    "[rank1]: iteration 10/100 | consumed samples 640 | lm loss 3.21",
    "[rank0]: iteration 20/100 | consumed samples 1280 | lm loss 3.02",
]
TAIL = [
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "/work/train.py", line 88, in <module>',
    "[rank1]:     main()",
    "[rank1]: SyntaxError: invalid syntax (model.py, line 12)",
    "[rank0]: [E ProcessGroupGloo] Watchdog caught collective operation timeout",
]
COMPARED = ("decision", "basis", "rule", "primary", "cascades", "progress", "history", "budgets")


def write_log(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def cli_analyze(path: Path, *extra: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "relaunch.cli", "analyze", str(path), "--format", "json", *extra],
        cwd=str(REPO_ROOT),
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def same_verdict(a: dict, b: dict) -> None:
    for key in COMPARED:
        assert a.get(key) == b.get(key), (key, a.get(key), b.get(key))


def test_healthz_and_openapi_match_the_routes(service_factory):
    svc = service_factory()
    with svc.client() as c:
        health = c.get("/healthz")
        assert health.status_code == 200
        assert health.json() == {"status": "ok", "issues": []}
        spec = c.get("/openapi.json").json()
    paths = spec["paths"]
    for p in (
        "/healthz",
        "/logs",
        "/v1/jobs",
        "/v1/jobs/{job_id}/cycles/{cycle}/verdict",
        "/v1/jobs/{job_id}/cycles/{cycle}/log",
        "/v1/jobs/{job_id}/cycles/{cycle}/fr",
        "/v1/search",
    ):
        assert p in paths, p
    assert set(paths["/logs"]) == {"get", "post"}
    body = spec["components"]["schemas"]["LogSubmission"]["properties"]
    assert set(body) == {"log_path", "user", "job_id", "cycle_id", "analysis_intent", "fact_key"}
    assert "ErrorBody" in spec["components"]["schemas"]


def test_terminal_verdict_equals_relaunch_analyze(service_factory):
    svc = service_factory()
    log = write_log(svc.root / "job1" / "cycle_0.log", HEAD + TAIL)
    with svc.client() as c:
        r = c.post(
            "/logs",
            json={
                "log_path": str(log),
                "user": "alice",
                "job_id": "job1",
                "cycle_id": 0,
                "analysis_intent": "terminal",
            },
        )
        assert r.status_code == 200, r.text
        sub = r.json()
        assert sub["submitted"] is True and sub["normalized_path"] == str(log.resolve())
        got = c.get("/logs", params={"log_path": str(log), "wait": "true"}).json()
    assert got["status"] == "completed"
    expected = cli_analyze(log)
    same_verdict(got["result"], expected)
    assert got["recommendation"] == {
        "action": expected["decision"],
        "reason": expected["basis"],
        "source": "deterministic",
    }
    assert got["result"]["state"] == ("STOP" if expected["decision"] == "STOP" else "CONTINUE")


def test_progressive_log_is_read_as_it_grows_and_equals_one_shot(service_factory):
    svc = service_factory(extra_args=["--poll-interval", "0.05"])
    log = svc.root / "grow" / "cycle_0.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"")
    body = ("\n".join(HEAD * 200 + TAIL) + "\n").encode()
    with svc.client() as c:
        r = c.post(
            "/logs",
            json={
                "log_path": str(log),
                "job_id": "grow",
                "cycle_id": 0,
                "analysis_intent": "progressive",
            },
        )
        assert r.status_code == 200 and r.json()["status"] == "pending"
        pieces = [body[i : i + 997] for i in range(0, len(body) - 40, 997)]  # cut mid-line
        with open(log, "ab") as fh:
            for piece in pieces:
                fh.write(piece)
                fh.flush()
        deadline = time.monotonic() + 20
        while c.get("/v1/stats").json()["bytes_read"] < sum(map(len, pieces)):
            assert time.monotonic() < deadline, "progressive reader did not catch up"
            time.sleep(0.05)
        pending = c.get("/logs", params={"log_path": str(log), "wait": "false"}).json()
        assert pending["status"] == "pending"
        with open(log, "ab") as fh:
            fh.write(body[sum(map(len, pieces)) :])
        c.post(
            "/logs",
            json={
                "log_path": str(log),
                "job_id": "grow",
                "cycle_id": 0,
                "analysis_intent": "terminal",
            },
        )
        done = c.get("/logs", params={"log_path": str(log)}).json()
    assert done["status"] == "completed"
    # the final analysis read only the tail; every byte was read exactly once
    assert done["analysis"]["tail_bytes"] < 1000
    assert done["analysis"]["bytes_read"] == len(body)
    same_verdict(done["result"], cli_analyze(log))


def test_history_survives_a_service_restart(service_factory):
    svc = service_factory()
    logs = [write_log(svc.root / "hist" / f"cycle_{i}.log", HEAD + TAIL) for i in range(3)]
    with svc.client() as c:
        verdicts = []
        for i, log in enumerate(logs):
            c.post(
                "/logs",
                json={
                    "log_path": str(log),
                    "job_id": "hist",
                    "cycle_id": i,
                    "analysis_intent": "terminal",
                },
            )
            verdicts.append(c.get("/logs", params={"log_path": str(log)}).json())
    assert [v["status"] for v in verdicts] == ["completed"] * 3
    # cycle 2 saw cycles 0 and 1 as history, like `relaunch analyze --db` would
    db_cli = [
        cli_analyze(
            log,
            "--db",
            f"sqlite:///{svc.workdir / 'cli.db'}",
            "--job-id",
            "hist",
            "--cycle",
            str(i),
        )
        for i, log in enumerate(logs)
    ]
    for got, want in zip(verdicts, db_cli, strict=True):
        same_verdict(got["result"], want)
    svc.restart()
    with svc.client() as c:
        again = c.get("/logs", params={"log_path": str(logs[2]), "wait": "false"}).json()
        assert again["status"] == "completed" and again["cached"] is True
        assert again["result"]["decision"] == verdicts[2]["result"]["decision"]
        job = c.get("/v1/jobs/hist").json()
        assert [cy["cycle"] for cy in job["cycle_list"]] == [0, 1, 2]
        # a repeated terminal request is answered from the database, not re-analysed
        c.post(
            "/logs",
            json={
                "log_path": str(logs[1]),
                "job_id": "hist",
                "cycle_id": 1,
                "analysis_intent": "terminal",
            },
        )
        c.get("/logs", params={"log_path": str(logs[1])})
        stats = c.get("/v1/stats").json()
        assert stats["analyses_started"] == 0 and stats["cache_hits"] == 1


def test_identical_concurrent_requests_are_coalesced(service_factory):
    svc = service_factory()
    lines = [f"[rank{r % 8}]: iteration {i} | lm loss 2.0" for i, r in enumerate(range(150_000))]
    log = write_log(svc.root / "co" / "cycle_0.log", lines + TAIL)
    answers: list[dict] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(12)

    def client() -> None:
        try:
            with svc.client() as c:
                barrier.wait()
                c.post(
                    "/logs",
                    json={
                        "log_path": str(log),
                        "job_id": "co",
                        "cycle_id": 0,
                        "analysis_intent": "terminal",
                    },
                ).raise_for_status()
                answers.append(c.get("/logs", params={"log_path": str(log)}).json())
        except BaseException as exc:  # noqa: BLE001 - collected and re-raised by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=client) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert len(answers) == 12 and {a["status"] for a in answers} == {"completed"}
    assert len({json.dumps(a["result"], sort_keys=True) for a in answers}) == 1
    with svc.client() as c:
        stats = c.get("/v1/stats").json()
    assert stats["analyses_started"] == 1
    assert stats["requests_coalesced"] + stats["cache_hits"] >= 1


def test_fifty_concurrent_clients_without_an_error(service_factory):
    import asyncio

    svc = service_factory()
    logs = [write_log(svc.root / "many" / f"job{i}.log", HEAD + TAIL) for i in range(50)]

    async def one(ac: httpx.AsyncClient, i: int) -> tuple[int, int, str]:
        r1 = await ac.post(
            "/logs",
            json={
                "log_path": str(logs[i]),
                "job_id": f"many{i}",
                "cycle_id": 0,
                "analysis_intent": "terminal",
            },
        )
        r2 = await ac.get("/logs", params={"log_path": str(logs[i])})
        r3 = await ac.get(f"/v1/jobs/many{i}/cycles/0/verdict")
        return r1.status_code, r2.status_code, r2.json()["status"] + str(r3.status_code)

    async def main() -> list[tuple[int, int, str]]:
        async with svc.async_client(timeout=120) as ac:
            return await asyncio.gather(*(one(ac, i) for i in range(50)))

    results = asyncio.run(main())
    assert results == [(200, 200, "completed200")] * 50


def test_unix_socket_service(service_factory):
    svc = service_factory(uds=True)
    assert svc.endpoint.startswith("unix://")
    log = write_log(svc.root / "u" / "cycle_0.log", HEAD + TAIL)
    with svc.client() as c:
        assert c.get("/healthz").json()["status"] == "ok"
        c.post("/logs", json={"log_path": str(log), "analysis_intent": "terminal"})
        got = c.get("/logs", params={"log_path": str(log)}).json()
    assert got["status"] == "completed"
    assert got["job_id"].startswith("cycle_0-")  # NVRx clients send no job id
    same_verdict(got["result"], cli_analyze(log))
    assert stat.S_IMODE(os.stat(svc.uds).st_mode) == 0o600  # owner only
    # a second service cannot take over a socket that is being served
    proc = subprocess.run(
        [sys.executable, "-m", "relaunch.cli", "serve", "--uds", str(svc.uds)],
        cwd=str(REPO_ROOT),
        env=cli_env({"RELAUNCH_HOME": str(svc.workdir / "h2")}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "another server is listening" in proc.stderr
    svc.proc.kill()  # ends without cleanup: the socket file stays behind, stale
    svc.proc.wait(10)
    assert svc.uds.exists()
    svc.start()
    with svc.client() as c:
        assert c.get("/logs", params={"log_path": str(log), "wait": "false"}).json()["cached"]


def test_v1_jobs_cycles_evidence_search_and_upload(service_factory):
    svc = service_factory()
    body = ("\n".join(HEAD + TAIL) + "\n").encode()
    with svc.client() as c:
        # upload in two pieces (second one ends the log): no shared filesystem needed
        r = c.post("/v1/jobs/up/cycles/0/log", params={"final": "false"}, content=body[:50])
        assert r.status_code == 200 and r.json()["status"] == "pending"
        r = c.post("/v1/jobs/up/cycles/0/log", params={"append": "true"}, content=body[50:])
        assert r.status_code == 200, r.text
        verdict = r.json()["verdict"]
        assert r.json()["status"] == "completed"
        assert c.get("/v1/jobs").json()["jobs"][0]["job_id"] == "up"
        cyc = c.get("/v1/jobs/up/cycles/0").json()
        assert cyc["verdict"]["decision"] == verdict["decision"]
        assert cyc["log_size"] == len(body)
        ev = c.get("/v1/jobs/up/cycles/0/evidence").json()
        assert ev["primary"] == verdict["primary"]
        cycles = c.get("/v1/jobs/up/cycles").json()["cycles"]
        assert [x["cycle"] for x in cycles] == [0]
        if verdict["primary"]:
            fp = verdict["primary"]["fingerprint"]
            hits = c.get("/v1/search", params={"fingerprint": fp}).json()["results"]
            assert [(h["job_id"], h["cycle"]) for h in hits] == [("up", 0)]
        assert c.get("/v1/search").status_code == 400
        assert c.get("/v1/jobs/nope").json()["error_code"] == "not_found"
        assert c.get("/v1/jobs/up/cycles/7").status_code == 404
        assert c.get("/v1/jobs/up/cycles/7/verdict").status_code == 404
    uploaded = svc.workdir / "data" / "uploads" / "up" / "cycle_0.log"
    assert uploaded.read_bytes() == body
    same_verdict(verdict, cli_analyze(uploaded))


def test_track_only_then_get_analyses_like_nvrx(service_factory):
    svc = service_factory()
    log = svc.root / "nvrx" / "slurm-123.out"
    with svc.client() as c:
        # registered before the file exists (cycle start), written later
        r = c.post("/logs", json={"log_path": str(log), "user": "bob"})
        assert r.status_code == 200 and r.json()["cycle_id"] == 0
        assert (
            c.get("/logs", params={"log_path": str(log), "wait": "false"}).json()["status"]
            == "pending"
        )
        write_log(log, HEAD + TAIL)
        got = c.get("/logs", params={"log_path": str(log)}).json()  # wait defaults to true
        assert got["status"] == "completed"
        # the same path again without cycle_id is the same cycle, not a new one
        again = c.post("/logs", json={"log_path": str(log)}).json()
        assert (again["job_id"], again["cycle_id"]) == (got["job_id"], 0)
    same_verdict(got["result"], cli_analyze(log))
