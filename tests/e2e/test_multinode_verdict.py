"""One job, one verdict, on every node (issue 23): several `relaunch run` launchers on
loopback reporting to one real `relaunch serve`.

- 3 nodes x 2 gloo workers, global rank 3 (on node 1, not the store host) raises the same
  ValueError at startup every cycle, `--ft-attribution-stop-action no-restart`: every
  launcher exits 3 with the same reason; the stored verdict of the deciding cycle blames
  rank 3 on node1 with fan_out.ranks_seen == 6, and the cycle lists its 3 node logs.
- A SIGKILLed launcher: its job reads `lost` (not `running`) once its lease expired.
- A job that may span nodes (fixed or elastic) with the embedded engine is refused on
  every node with a one-line error.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relaunch.storage import node_logs, open_repository
from tests._launcher_helpers import engine_available, relaunch_env
from tests._rdzv_helpers import free_port, start_node, start_nodes, stop_all
from tests._service_helpers import running_service

STARTUP_BUG = """
import os, sys, time
import torch.distributed as dist
rank = int(os.environ["RANK"])
if rank == 3:
    raise ValueError("bad config value for layer 7")
dist.init_process_group("gloo")
dist.barrier()
time.sleep(600)
"""

SLEEPER = """
import os, pathlib, time
pathlib.Path("worker.pid").write_text(str(os.getpid()))
print("up", flush=True)
time.sleep(600)
"""


@pytest.fixture(autouse=True)
def _engine() -> None:
    if why := engine_available():
        pytest.skip(why)


def test_three_nodes_one_stop_verdict_every_node_exits_3(tmp_path: Path) -> None:
    script = tmp_path / "bug.py"
    script.write_text(STARTUP_BUG)
    port = free_port()
    nodes: list = []
    with running_service(tmp_path, extra_args=("--node-wait", "60")) as svc:
        try:
            start_nodes(  # node 0 first: it hosts the store
                nodes, tmp_path, port, "3", 3, worker=script,
                extra=(
                    "--nproc-per-node", "2", "--max-restarts", "5",
                    "--ft-attribution-endpoint", svc.endpoint,
                    "--ft-attribution-stop-action", "no-restart",
                ),
            )  # fmt: skip
            codes = [n.wait(timeout=400) for n in nodes]
        finally:
            stop_all(nodes)
        texts = [n.text() for n in nodes]
        assert codes == [3, 3, 3], "\n-----\n".join(texts)
        reasons = set()
        for t in texts:
            line = [x for x in t.splitlines() if "job stopped by verdict for cycle" in x]
            assert line, t
            reasons.add(line[-1].split("relaunch: ", 1)[1])
            assert "Traceback" not in t.split("job stopped by verdict")[-1]
            assert "terminate called" not in t
        assert len(reasons) == 1, reasons  # the same one-line reason on every node
        cycle = int(next(iter(reasons)).split("cycle ")[1].split(":")[0])
        with svc.client() as c:
            data = c.get(f"/v1/jobs/rz/cycles/{cycle}/nodes").json()
            job = c.get("/v1/jobs/rz").json()
        verdict = data["verdict"]
        assert data["status"] == "completed"
        assert verdict["decision"] == "STOP"
        assert verdict["primary"]["rank"] == 3
        assert verdict["primary"]["node"] == "node1"
        assert verdict["fan_out"]["ranks_seen"] == 6
        logs = data["logs"]
        assert [r["node"] for r in logs] == ["node0", "node1", "node2"]
        assert all(r["sha256"] and r["size"] for r in logs)
        assert sorted(e["node"] for e in verdict["cycle_nodes"]["analysed"]) == [
            "node0", "node1", "node2",
        ]  # fmt: skip
        assert verdict["cycle_nodes"]["missing"] == []
        assert job["state"] == "stopped"


def _launcher(tmp_path: Path, endpoint: str, script: Path, *extra: str) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable, "-m", "relaunch.cli", "run", "--nproc-per-node", "1",
        "--log-dir", str(tmp_path / "logs"), "--job-id", "gone",
        "--ft-attribution-endpoint", endpoint, "--ft-gpu-health", "off", *extra, str(script),
    ]  # fmt: skip
    return subprocess.Popen(
        cmd, cwd=tmp_path, env=relaunch_env(tmp_path), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )  # fmt: skip


def test_sigkilled_launcher_job_reads_lost(tmp_path: Path) -> None:
    script = tmp_path / "sleep.py"
    script.write_text(SLEEPER)
    with running_service(tmp_path, extra_args=("--lease-timeout", "2")) as svc:
        proc = _launcher(tmp_path, svc.endpoint, script)
        repo = open_repository(svc.db_url)
        try:
            deadline = time.monotonic() + 120
            while not node_logs.leases(repo, "gone") and time.monotonic() < deadline:
                assert proc.poll() is None, proc.communicate()[0]
                time.sleep(0.2)  # the launcher takes its lease at its first cycle
            assert node_logs.leases(repo, "gone"), "no lease taken"
            with svc.client() as c:
                assert _wait_state(c, "running", 60) == "running"
                proc.send_signal(signal.SIGKILL)  # no end, no release: it vanishes
                proc.wait(timeout=30)
                state = _wait_state(c, "lost", 60)
                job = c.get("/v1/jobs/gone").json()
        finally:
            repo.close()
            if proc.poll() is None:
                proc.kill()
            _kill_orphans(tmp_path)
        assert state == "lost", job
        assert "node0" in (job.get("end_reason") or ""), job
        listed = {j["job_id"]: j["state"] for j in _jobs(svc)}
        assert listed["gone"] == "lost"


def _kill_orphans(tmp_path: Path) -> None:
    """The SIGKILLed launcher's worker outlives it: end it by the pid it wrote."""
    pid_file = tmp_path / "worker.pid"
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def _jobs(svc) -> list[dict]:
    with svc.client() as c:
        body = c.get("/v1/jobs").json()
    return body["jobs"] if isinstance(body, dict) else body


def _wait_state(c, want: str, limit_s: float) -> str:
    """The job's state once it is `want` (or whatever it is at the limit)."""
    deadline = time.monotonic() + limit_s
    state = ""
    while time.monotonic() < deadline:
        r = c.get("/v1/jobs/gone")
        state = r.json().get("state", "") if r.status_code == 200 else ""
        if state == want:
            return state
        time.sleep(0.2)
    return state


@pytest.mark.parametrize("nnodes", ["3", "1:3"])
def test_embedded_multinode_is_refused_with_one_line_on_every_node(
    tmp_path: Path, nnodes: str
) -> None:
    """Fixed (`3`) and elastic (`1:3`) alike: with the embedded engine a round may hold
    several nodes whose own engines would each judge (and end) the job on one node's log, so
    every launcher refuses before anything starts: exit 2, one line saying what to run
    instead, no worker, no cycle log (the launchers start in the order 2, 0, 1)."""
    script = tmp_path / "sleep.py"
    script.write_text(SLEEPER)
    port = free_port()
    nodes: list = []
    try:
        for i in (2, 0, 1):
            nodes.append(
                start_node(
                    tmp_path, f"n{i}", port, nnodes, group_rank=i, worker=script, job="emb",
                    extra=("--ft-attribution-endpoint", "embedded"),
                )
            )  # fmt: skip
        codes = [n.wait(timeout=120) for n in nodes]
    finally:
        stop_all(nodes)
    texts = [n.text() for n in nodes]
    assert codes == [2, 2, 2], texts
    for text in texts:
        lines = [x for x in text.splitlines() if x.strip()]
        assert len(lines) == 1, lines
        assert lines[0].startswith("relaunch: error: --ft-attribution-endpoint embedded")
        assert f"(--nnodes {nnodes})" in lines[0] and "relaunch serve" in lines[0]
    assert not (tmp_path / "worker.pid").exists()
    assert not list((tmp_path / "logs").glob("emb/cycle_*"))


def test_a_re_decided_cycle_is_pushed_to_a_running_launcher(tmp_path: Path) -> None:
    """A cycle decided without node1 (it had not ended when `--node-wait` passed) is decided
    again when node1's end arrives; the launcher's HTTP client, still running, learns it at
    its next lease renewal (`check_redecided`, called here directly instead of waiting for
    the renewal thread) as a verdict with `redecided=True`, once. Real service, real client."""
    from relaunch.launcher.attribution_client import HttpClient

    job = tmp_path / "logs" / "late"
    job.mkdir(parents=True)
    for k in (0, 1):
        (job / f"cycle_0.node{k}.log").write_text(f"[relaunch] node{k}: worker failed\n")
    got: list = []
    with running_service(tmp_path, extra_args=("--node-wait", "1")) as svc:
        client = HttpClient(got.append, lambda _w: None, endpoint=svc.endpoint)
        try:
            with svc.client() as c:
                for k in (0, 1):
                    body = {"log_path": str(job / f"cycle_0.node{k}.log"), "nodes": 2}
                    r = c.post(f"/v1/jobs/late/cycles/0/nodes/node{k}", json=body)
                    assert r.status_code == 200, r.text
                r = c.post("/v1/jobs/late/cycles/0/nodes/node0/end", json={"outcome": "failed"})
                assert r.status_code == 200, r.text
                first = client._analyze_nodes("late", 0)  # what the launcher acted on
                assert first.raw["verdict"]["cycle_nodes"]["missing"] == ["node1"]
                assert client.check_redecided() == []  # nothing new yet
                r = c.post("/v1/jobs/late/cycles/0/nodes/node1/end", json={"outcome": "failed"})
                assert r.status_code == 200, r.text
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:  # the re-decision is stored (an event)
                    v = c.get("/v1/jobs/late/cycles/0/nodes").json().get("verdict") or {}
                    if v.get("cycle_nodes", {}).get("missing") == []:
                        break
                    time.sleep(0.1)
            pushed = client.check_redecided()
            assert len(pushed) == 1 and pushed[0].redecided and got == pushed
            nodes = pushed[0].raw["verdict"]["cycle_nodes"]
            assert nodes["missing"] == [] and nodes["previous"] is not None
            assert client.check_redecided() == []  # pushed once
        finally:
            client.close()
