"""Helpers for the dashboard, browser and MCP tests: real history data and a real server.

- `seed_history(repo)` writes a small, realistic history into a real repository: verdicts
  are built from the restart agent's own model types (`Verdict.to_dict()`), with cascades,
  progress, FR findings, an LLM enrichment and an XSS attempt in a log line.
- `DashboardServer(repo)` serves the dashboard router in a minimal FastAPI app with
  uvicorn on 127.0.0.1 (a free port), in a thread of the test process.
- `http_get(url)` a small httpx GET.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from restart_agent.model import CascadeGroup, Evidence, Progress, Verdict

REPO_ROOT = Path(__file__).resolve().parent.parent
XSS = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'


def _ev(
    line: int,
    fclass: str,
    text: str,
    *,
    rank: int | None = 0,
    role: str = "root",
    domain: str = "workload",
    fp: str | None = None,
) -> Evidence:
    return Evidence(
        line=line,
        rank=rank,
        pattern_id=fclass,
        failure_class=fclass,
        domain=domain,  # type: ignore[arg-type]
        role=role,  # type: ignore[arg-type]
        recoverability="retry" if domain == "infrastructure" else "stop",
        text=text,
        fingerprint=fp or f"{fclass}:{text[:40]}",
    )


def make_verdict(
    decision: str,
    rule: str,
    primary: Evidence | None,
    *,
    iteration: int | None,
    same_root: int = 0,
    basis: str = "",
    cascades: list[CascadeGroup] | None = None,
) -> dict[str, Any]:
    v = Verdict(
        decision=decision,  # type: ignore[arg-type]
        basis=basis or f"{decision} by {rule}",
        rule=rule,
        primary=primary,
        cascades=cascades or [],
        progress=Progress(
            known=iteration is not None, last_iteration=iteration, dialect="plain_step"
        ),
        history={"same_root_prior_cycles": same_root, "consecutive_no_progress": same_root},
        budgets={"same_root_no_progress_retries": 3, "job_no_progress_ceiling": 5},
        evidence=[primary] if primary else [],
    )
    return v.to_dict()


def seed_history(repo: Any, job_id: str = "train-llama") -> dict[str, Any]:
    """A job with 4 cycles (3 RESTART, then STOP) and a second, running job."""
    nccl = _ev(
        120,
        "nccl_network_error",
        "NCCL WARN NET/IB : Got completion with error 12, opcode 0, len 0",
        rank=5,
        domain="infrastructure",
        fp="nccl_network_error:Got completion with error N",
    )
    watchdog = CascadeGroup(
        failure_class="nccl_watchdog_timeout",
        role="cascade",
        count=7,
        ranks=[0, 1, 2, 3, 4, 6, 7],
        first_line=130,
        example="[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42)",
    )
    evil = _ev(
        57,
        "python_value_error",
        f"ValueError: bad token {XSS}",
        rank=2,
        fp="python_value_error:bad token",
    )
    syntax = _ev(
        3,
        "python_syntax_error",
        "SyntaxError: invalid syntax (train.py, line 88)",
        rank=0,
        fp="python_syntax_error:invalid syntax",
    )
    cycles = [
        (
            make_verdict(
                "RESTART",
                "infra_restart",
                nccl,
                iteration=100,
                cascades=[watchdog],
                basis="NCCL network error on rank 5; restarting.",
            ),
            {"culprit_ranks": [5], "summary": "rank 5 never entered collective SeqNum=42"},
            None,
        ),
        (
            make_verdict("RESTART", "progress_protects", nccl, iteration=250, same_root=1),
            None,
            None,
        ),
        (
            make_verdict("RESTART", "workload_first_seen", evil, iteration=250),
            None,
            {
                "explanation": {
                    "text": f"The tokenizer rejected an input. {XSS}",
                    "citations": [{"line": 57, "quote": "ValueError: bad token"}],
                },
                "owner": {"value": "workload", "citations": []},
                "recovery_outlook": {
                    "value": "uncertain",
                    "text": "Depends on data.",
                    "citations": [],
                },
                "deterministic_workload_bug": False,
                "model": "test-model",
            },
        ),
        (
            make_verdict(
                "STOP",
                "workload_certain_stop",
                syntax,
                iteration=None,
                basis="SyntaxError in the user's code on every rank cannot heal by restarting.",
            ),
            None,
            None,
        ),
    ]
    for n, (verdict, fr, llm) in enumerate(cycles):
        repo.register_cycle(job_id, n, f"/logs/{job_id}/cycle_{n}.log", node="node-a")
        repo.save_verdict(job_id, n, verdict)
        if fr:
            repo.save_fr_findings(job_id, n, fr)
        if llm:
            repo.save_llm(job_id, n, llm)
    repo.set_job_state(job_id, "stopped")
    repo.register_cycle("job-running", 0, "/logs/job-running/cycle_0.log")
    return {"job_id": job_id, "cycles": len(cycles), "fingerprints": [nccl.fingerprint]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DashboardServer:
    """The dashboard router in a minimal FastAPI app, served by uvicorn on loopback."""

    def __init__(self, repo: Any) -> None:
        import uvicorn
        from fastapi import FastAPI

        from web.routes import create_router

        app = FastAPI()
        app.include_router(create_router(lambda: repo))
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> DashboardServer:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("dashboard server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.should_exit = True
        self._thread.join(10)


def http_get(url: str, **kw: Any) -> httpx.Response:
    return httpx.get(url, timeout=10, **kw)
