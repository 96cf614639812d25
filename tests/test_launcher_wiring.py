"""`relaunch run` wired to engineer H's parts: the gRPC log funnel and the node health preflight."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests._launcher_helpers import WORKER, cycle_logs, job_args, run_relaunch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_cycle_logs_go_to_the_funnel_writer(tmp_path: Path) -> None:
    from launcher.funnel import FunnelServer

    root = tmp_path / "writer"
    root.mkdir()
    server = FunnelServer(root, "127.0.0.1", 0)
    server.start()
    try:
        r = run_relaunch(
            tmp_path,
            job_args(
                tmp_path,
                "fun",
                "--ft-attribution-endpoint",
                "off",
                "--ft-log-funnel",
                server.address,
            )
            + [str(WORKER), "--mode", "crash_once"],
        )
    finally:
        server.stop()
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in root.glob("cycle_*.log")) == ["cycle_0.log", "cycle_1.log"]
    assert cycle_logs(tmp_path, "fun") == []  # nothing written locally
    log0 = (root / "cycle_0.log").read_text()
    assert "[relaunch] rank 1 killed by signal SIGKILL" in log0
    for line in log0.splitlines():
        assert re.match(r"^(\[rank \d\]: |\[relaunch\] )", line), line
    assert "[rank 0]: hello from rank 0 of 2 in cycle 0" in log0


def test_bad_funnel_address_is_a_usage_error(tmp_path: Path) -> None:
    r = run_relaunch(tmp_path, ["--ft-log-funnel", "nocolon", str(WORKER)], timeout=60)
    assert r.returncode == 2
    assert "--ft-log-funnel 'nocolon': expected HOST:PORT or unix:/PATH" in r.stderr


def test_unhealthy_node_does_not_join(tmp_path: Path) -> None:
    from tests._health_helpers import start_health_service

    with start_health_service("failing") as endpoint:
        r = run_relaunch(
            tmp_path,
            job_args(
                tmp_path,
                "sick",
                "--ft-attribution-endpoint",
                "off",
                "--ft-node-health-check-endpoint",
                endpoint,
            )
            + [str(WORKER), "--mode", "ok"],
        )
    assert r.returncode == 4, r.stderr
    assert "node unhealthy, not joining the rendezvous" in r.stderr
    assert "ib check failed" in r.stderr
    assert cycle_logs(tmp_path, "sick") == []  # no worker was started


def test_healthy_node_runs(tmp_path: Path) -> None:
    from tests._health_helpers import start_health_service

    with start_health_service("healthy") as endpoint:
        r = run_relaunch(
            tmp_path,
            job_args(
                tmp_path,
                "fit",
                "--ft-attribution-endpoint",
                "off",
                "--ft-node-health-check-endpoint",
                endpoint,
            )
            + [str(WORKER), "--mode", "ok"],
        )
    assert r.returncode == 0, r.stderr
    assert cycle_logs(tmp_path, "fit") == ["cycle_0.log"]


def test_bad_health_endpoint_is_a_usage_error(tmp_path: Path) -> None:
    r = run_relaunch(
        tmp_path, ["--ft-node-health-check-endpoint", "ftp://x", str(WORKER)], timeout=60
    )
    assert r.returncode == 2
    assert "unsupported scheme" in r.stderr and "Traceback" not in r.stderr


def test_two_nodes_name_logs_by_node_and_global_rank(tmp_path: Path) -> None:
    """Two launchers on this machine form one job over a c10d rendezvous (1 worker each)."""
    import socket
    import subprocess
    import sys

    from tests._launcher_helpers import relaunch_env

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    common = [
        sys.executable, "-m", "relaunch_cli", "run",
        "--nnodes", "2", "--nproc-per-node", "1",
        "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "two",
        "--log-dir", str(tmp_path / "logs"), "--job-id", "two",
        "--ft-attribution-endpoint", "off", "--ft-gpu-health", "off",
        str(WORKER), "--mode", "ok",
    ]  # fmt: skip
    procs = [
        subprocess.Popen(
            common, cwd=tmp_path, env=relaunch_env(tmp_path), stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    errs = [p.communicate(timeout=100)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    assert cycle_logs(tmp_path, "two") == ["cycle_0.node0.log", "cycle_0.node1.log"]
    seen = {}
    for k in (0, 1):
        text = (tmp_path / "logs" / "two" / f"cycle_0.node{k}.log").read_text()
        m = re.search(r"^\[rank (\d)\]: hello from rank \1 of 2 in cycle 0 pid \d+$", text, re.M)
        assert m, text
        seen[k] = int(m.group(1))
        assert f"[relaunch] cycle 0 start: job=two node={k} " in text
    assert sorted(seen.values()) == [0, 1]  # global ranks, one per node
