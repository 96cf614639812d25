"""Helpers for the dashboard, browser and MCP tests: real history data and a real server.

- `seed_history(repo)` writes a small, realistic history into a real repository: verdicts
  are built from the restart agent's own model types (`Verdict.to_dict()`), with cascades,
  progress, FR findings, an LLM enrichment and an XSS attempt in a log line; cycles start
  and end at fixed offsets from `T0` (so durations and goodput are exact); a job stopped on
  an earlier cycle than its last one; a running job.
- `DashboardServer(repo, log_root=None)` serves the dashboard router in a minimal FastAPI
  app with uvicorn on 127.0.0.1 (a free port), in a thread of the test process; with
  `log_root`, cycle logs under it are readable through the service's `open_confined`.
- `write_job_logs(dir)` generated cycle logs; `analyze(db_url, log, cycle)` runs the real
  `relaunch analyze --db --job-id --cycle --format json` on one and returns its verdict.
- `http_get(url)` a small httpx GET.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx

from relaunch.restart_agent.model import Budgets, CascadeGroup, Evidence, History, Progress, Verdict

REPO_ROOT = Path(__file__).resolve().parent.parent
JOB = "llama-7b-run"  # the job write_job_logs' logs belong to
# cycles of seed_history start at these minutes after T0 and run this many minutes
T0 = (datetime.now(timezone.utc) - timedelta(hours=6)).replace(second=0, microsecond=0)
SEED_TIMES = [(0, 70), (75, 105), (185, 35), (230, 1)]
SEED_GOODPUT = round(100 * (70 + 105) / 231)  # cycles 0 and 1 advanced; wall 0..231 min
# cycle 1's newest complete checkpoint (the launcher's `checkpoint` fact): 66 minutes
# before the job's last cycle ended (T0 + 231 min), so the job page says "1 h 06 min" lost
SEED_CHECKPOINT = {
    "step": 200,
    "tier": "persistent",
    "size": 2 << 30,
    "path": "/ckpt/step_000000200",
    "at": (T0 + timedelta(minutes=165)).timestamp(),
}
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
    node: str | None = None,
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
        node=node,
    )


def make_verdict(
    decision: str,
    rule: str,
    primary: Evidence | None,
    *,
    iteration: int | None,
    first: int | None = None,
    same_root: int = 0,
    basis: str = "",
    cascades: list[CascadeGroup] | None = None,
    checkpoint: dict[str, Any] | None = None,
) -> dict[str, Any]:
    v = Verdict(
        decision=decision,  # type: ignore[arg-type]
        basis=basis or f"{decision} by {rule}",
        rule=rule,
        primary=primary,
        cascades=cascades or [],
        progress=Progress(
            known=iteration is not None,
            last_iteration=iteration,
            first_iteration=first,
            dialect="plain_step",
            checkpoint=checkpoint,
        ),
        history=History.from_dict(
            {"same_root_prior_cycles": same_root, "consecutive_no_progress": same_root}
        ),
        budgets=Budgets.from_dict(
            {"same_root_no_progress_retries": 3, "job_no_progress_ceiling": 5}
        ),
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
        node="node-b",
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
    oom = _ev(
        44,
        "cuda_oom",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        rank=3,
        fp="cuda_oom:Tried to allocate N GiB",
        node="node-c",
    )
    cycles = [
        (
            make_verdict(
                "RESTART",
                "infra_restart",
                nccl,
                iteration=100,
                first=0,
                cascades=[watchdog],
                basis="NCCL network error on rank 5; restarting.",
            ),
            {"culprit_ranks": [5], "summary": "rank 5 never entered collective SeqNum=42"},
            None,
        ),
        (
            make_verdict(
                "RESTART",
                "progress_protects",
                nccl,
                iteration=250,
                first=100,
                same_root=1,
                checkpoint=SEED_CHECKPOINT,
            ),
            None,
            None,
        ),
        (
            make_verdict("RESTART", "workload_first_seen", evil, iteration=250, first=250),
            None,
            {  # the verdict's `llm` object as restart_agent.llm writes it
                "status": "ok",
                "model": "test-model",
                "latency_ms": 412.0,
                "grounded": True,
                "contributed": False,
                "not_used_because": "the model sees a data problem, not a code bug",
                "explanation": f"The tokenizer rejected an input. {XSS}",
                "owner": "workload",
                "recovery_outlook": "uncertain",
                "recovery_text": "Depends on data.",
                "deterministic_workload_bug": False,
                "citations": {
                    "explanation": [
                        {"line": 57, "quote": "ValueError: bad token", "grounded": True}
                    ],
                    "owner": [
                        {
                            "line": 9,
                            "quote": "made up",
                            "grounded": False,
                            "reason": "quote is not in that line",
                        }
                    ],
                },
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
        start, minutes = SEED_TIMES[n]
        started = T0 + timedelta(minutes=start)
        repo.register_cycle(
            job_id, n, f"/logs/{job_id}/cycle_{n}.log", node="node-a", started_at=started
        )
        repo.set_cycle_ended(job_id, n, started + timedelta(minutes=minutes))
        repo.save_verdict(job_id, n, verdict)
        if fr:
            repo.save_fr_findings(job_id, n, fr)
        if llm:
            repo.save_llm(job_id, n, llm)
    repo.set_job_state(job_id, "stopped")
    # stopped on cycle 0; the launcher had already registered cycle 1, never analysed
    repo.register_cycle("stopped-early", 0, "/logs/stopped-early/cycle_0.log", started_at=T0)
    repo.save_verdict("stopped-early", 0, make_verdict("STOP", "oom_stop", oom, iteration=None))
    repo.register_cycle("stopped-early", 1, "/logs/stopped-early/cycle_1.log")
    repo.set_job_state("stopped-early", "stopped")
    repo.register_cycle("job-running", 0, "/logs/job-running/cycle_0.log")
    return {"job_id": job_id, "cycles": len(cycles), "fingerprints": [nccl.fingerprint]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DashboardServer:
    """The dashboard router in a minimal FastAPI app, served by uvicorn on loopback."""

    def __init__(self, repo: Any, log_root: Path | None = None) -> None:
        import uvicorn
        from fastapi import FastAPI

        from relaunch.attribution.service.confined import open_confined
        from relaunch.web.routes import create_router

        app = FastAPI()
        log_access = None
        if log_root is not None:  # the service's own confined opener
            root = Path(os.path.realpath(log_root))

            def log_access(raw: str) -> int:
                return open_confined(raw, [root])

        app.include_router(create_router(lambda: repo, log_access=log_access))
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


def write_job_logs(directory: Path, ranks: int = 4) -> list[Path]:
    """Three cycle logs of one job, as torchrun writes them (`[rankN]:` prefixes).

    Cycle 0 advances to iteration 120 and dies of an NCCL network error on rank 1 (an
    infrastructure failure: RESTART); cycle 1 advances to 260 and hits the same error
    again (progress protects the restart); cycle 2 fails with a SyntaxError on every rank
    before any progress (a certain workload bug: STOP). Cycle 1 also carries an XSS
    attempt in a log line.
    """
    directory.mkdir(parents=True, exist_ok=True)

    def progress(first: int, last: int) -> list[str]:
        return [
            f"[rank{r}]: [relaunch] progress rank={r} iteration={it} loss=2.{it % 97:02d}"
            for it in range(first, last + 1, 20)
            for r in range(ranks)
        ]

    net = (
        "[rank1]: node003:1234:5678 [1] NCCL WARN NET/IB : Got completion from peer "
        "10.0.0.3<40527> with error 12, opcode 0, len 0, vendor err 129"
    )
    watchdog = [
        f"[rank{r}]: [Rank {r}] Watchdog caught collective operation timeout: "
        f"WorkNCCL(SeqNum=77, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out."
        for r in range(ranks)
        if r != 1
    ]
    logs = {
        0: progress(0, 120) + [net] + watchdog,
        1: progress(120, 260) + [f"[rank2]: warning: odd token {XSS}", net] + watchdog,
        2: [
            line
            for r in range(ranks)
            for line in (
                f"[rank{r}]: Traceback (most recent call last):",
                f'[rank{r}]:   File "/work/train.py", line 88',
                f"[rank{r}]:     loss = model(x)) ",
                f"[rank{r}]: SyntaxError: unmatched ')'",
            )
        ],
    }
    paths = []
    for n, lines in logs.items():
        p = directory / f"cycle_{n}.log"
        p.write_text("\n".join(lines) + "\n")
        paths.append(p)
    return paths


def analyze(db_url: str, log: Path, cycle: int, job: str = JOB) -> dict[str, Any]:
    """`relaunch analyze LOG --db URL --job-id JOB --cycle N --format json` in a subprocess."""
    argv = [sys.executable, "-m", "relaunch.cli", "analyze", str(log), "--db", db_url]
    argv += ["--job-id", job, "--cycle", str(cycle), "--format", "json"]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    r = subprocess.run(argv, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"relaunch analyze exited {r.returncode}: {r.stderr}")
    return json.loads(r.stdout)
