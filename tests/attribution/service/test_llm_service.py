"""`relaunch serve --ft-llm-*`: the real service process enriches after publishing the verdict."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from tests._llm_helpers import KEY, answer, write_log
from tests._llm_server import LLMServer
from tests._service_helpers import require_restart_agent, running_service


def _wait_for_llm(c: httpx.Client, job: str, cycle: int, timeout: float = 20.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rec = c.get(f"/v1/jobs/{job}/cycles/{cycle}").json()
        if rec.get("llm"):
            return rec
        time.sleep(0.1)
    raise AssertionError(f"no LLM enrichment stored for {job}/{cycle} within {timeout}s")


def _serve_args(server: LLMServer, model: str, key: Path) -> list[str]:
    return [
        "--ft-llm-base-url", server.base_url, "--ft-llm-model", model,
        "--ft-llm-api-key-file", str(key), "--ft-llm-timeout", "10",
    ]  # fmt: skip


def test_service_publishes_the_verdict_then_stores_the_grounded_enrichment(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    require_restart_agent()
    logs = tmp_path / "logs"
    logs.mkdir()
    log, line = write_log(logs)
    model = llm_server.script([{"content": answer(line), "delay": 1.0}])
    with running_service(
        tmp_path, root=logs, extra_args=_serve_args(llm_server, model, key_file)
    ) as svc:
        with svc.client() as c:
            r = c.post(
                "/logs",
                json={
                    "log_path": str(log),
                    "job_id": "j1",
                    "cycle_id": 0,
                    "analysis_intent": "terminal",
                },
            )
            assert r.status_code == 200, r.text
            got = c.get("/logs", params={"log_path": str(log), "wait": "true"}).json()
            # published first, deterministic, while the model is still thinking
            assert got["status"] == "completed"
            assert got["recommendation"]["source"] == "deterministic"
            assert got["result"]["llm"] == {"contributed": False}
            rec = _wait_for_llm(c, "j1", 0)
        output = svc.output()
        sidecar = svc.audit_dir / "j1" / "cycle_0.llm.json"
        side = json.loads(sidecar.read_text())
    llm = rec["llm"]
    assert llm["status"] == "ok" and llm["grounded"] is True and llm["model"] == model
    assert llm["contributed"] is True and llm["deterministic"]["rule"] == "restart.workload_first"
    assert (
        rec["verdict"]["decision"] == "STOP"
        and rec["verdict"]["rule"] == "llm_grounded_workload_bug"
    )
    assert side["final"]["decision"] == "STOP" and side["llm"]["latency_ms"] >= 1000
    (req,) = llm_server.requests(model)
    assert req["authorization"] == f"Bearer {KEY}"
    assert KEY not in output + sidecar.read_text() + json.dumps(rec)


def test_service_with_a_failing_model_keeps_the_deterministic_verdict(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    require_restart_agent()
    logs = tmp_path / "logs"
    logs.mkdir()
    log, _ = write_log(logs)
    model = llm_server.script([{"status": 500, "echo_key": True}])
    with running_service(
        tmp_path, root=logs, extra_args=_serve_args(llm_server, model, key_file)
    ) as svc:
        with svc.client() as c:
            c.post(
                "/logs",
                json={
                    "log_path": str(log),
                    "job_id": "j2",
                    "cycle_id": 0,
                    "analysis_intent": "terminal",
                },
            )
            got = c.get("/logs", params={"log_path": str(log), "wait": "true"}).json()
            rec = _wait_for_llm(c, "j2", 0)
        output = svc.output()
    assert rec["verdict"]["decision"] == got["result"]["decision"] == "RESTART"
    assert rec["llm"]["contributed"] is False
    assert rec["llm"]["error"].startswith("http_error: HTTP 500 after 3 attempts")
    assert KEY not in output + json.dumps(rec)
