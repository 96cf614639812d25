"""Shared helpers of the launcher tests: run `relaunch run` as a real subprocess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKER = REPO / "tests" / "workers" / "gloo_job.py"


def relaunch_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH", "")] if p)
    env["RELAUNCH_HOME"] = str(tmp_path / "home")
    env.pop("TORCHELASTIC_RESTART_COUNT", None)
    env.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)  # the launcher's own default applies
    # a multi-node job refuses to start without a job secret: set it as a scheduler would
    env.setdefault("RELAUNCH_JOB_SECRET", "relaunch-test-job-secret-0123456789")
    return env


def run_relaunch(
    tmp_path: Path, args: list[str], *, timeout: float = 90, cmd: str = "run"
) -> subprocess.CompletedProcess[str]:
    """`python -m relaunch.cli CMD ARGS` with cwd=tmp_path; output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "relaunch.cli", cmd, *args],
        cwd=tmp_path,
        env=relaunch_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def job_args(tmp_path: Path, job_id: str, *extra: str) -> list[str]:
    """Common flags: 2 ranks, logs under tmp_path/logs, quick stop timeout, no GPU preflight."""
    return [
        "--nproc-per-node",
        "2",
        "--log-dir",
        str(tmp_path / "logs"),
        "--job-id",
        job_id,
        "--workers-stop-timeout",
        "3",
        "--ft-gpu-health",
        "off",
        *extra,
    ]


def cycle_logs(tmp_path: Path, job_id: str) -> list[str]:
    return sorted(p.name for p in (tmp_path / "logs" / job_id).glob("cycle_*.log"))


def read_log(tmp_path: Path, job_id: str, cycle: int) -> str:
    return (tmp_path / "logs" / job_id / f"cycle_{cycle}.log").read_text()


def engine_available() -> str | None:
    """None when the embedded analyzer can run, else why not (for pytest.skip)."""
    try:
        from relaunch import restart_agent
        from relaunch.attribution.core.engine import AttributionEngine  # noqa: F401
        from relaunch.storage import open_repository  # noqa: F401
    except ImportError as exc:
        return f"embedded attribution not importable yet: {exc}"
    if not hasattr(restart_agent, "LogScanner") or not hasattr(restart_agent, "decide"):
        return "restart_agent.LogScanner/decide not landed yet (engineer A)"
    return None


def run_two_nodes(
    tmp_path: Path, job_id: str, args: Sequence[str], *, timeout: float, nodes: int = 2
) -> tuple[list[int], list[str]]:
    """Two (`nodes`) `relaunch run` launchers on this machine forming one job over a c10d
    rendezvous on a free loopback port (one worker each, logs under tmp_path/logs, no
    analysis, no GPU preflight). `args` are more flags, then the script and its arguments.
    Returns every exit code and stderr text; a launcher still running at `timeout` is
    killed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    common = [
        sys.executable, "-m", "relaunch.cli", "run",
        "--nnodes", str(nodes), "--nproc-per-node", "1",
        "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", job_id,
        "--log-dir", str(tmp_path / "logs"), "--job-id", job_id,
        "--ft-attribution-endpoint", "off", "--ft-gpu-health", "off",
        *args,
    ]  # fmt: skip
    procs = [
        subprocess.Popen(
            common, cwd=tmp_path, env=relaunch_env(tmp_path), stderr=subprocess.PIPE, text=True
        )
        for _ in range(nodes)
    ]
    try:
        errs = [p.communicate(timeout=timeout)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return [p.returncode for p in procs], errs


FACT_PREFIX = "[relaunch] fact: "


def facts_of(text: str, kind: str) -> list[dict]:
    """The launcher facts of one kind in a cycle log's text, in order; each must be signed
    (a 32-hex `mac`, issue 26), which is checked and left out of the result."""
    import json

    out = []
    for line in text.splitlines():
        if line.startswith(FACT_PREFIX):
            body = json.loads(line[len(FACT_PREFIX) :])
            mac = body.pop("mac", "")
            assert len(mac) == 32 and all(c in "0123456789abcdef" for c in mac), line
            if body["fact"] == kind:
                out.append(body)
    return out
