"""`relaunch run` wired to engineer H's parts: the gRPC log funnel and the node health preflight."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests._launcher_helpers import WORKER, cycle_logs, job_args, run_relaunch, run_two_nodes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_cycle_logs_go_to_the_funnel_writer(tmp_path: Path) -> None:
    from relaunch.launcher.funnel import FunnelServer

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
        assert re.match(r"^(\[rank\d\]: |\[relaunch\] )", line), line
    assert "[rank0]: hello from rank 0 of 2 in cycle 0" in log0


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
    import json
    import socket

    # no cycle ran: no verdict to join, but the report is kept next to the logs
    first = tmp_path / "logs" / "sick" / "node_health" / f"{socket.gethostname()}.first.json"
    assert json.loads(first.read_text())["healthy"] is False


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
    codes, errs = run_two_nodes(tmp_path, "two", [str(WORKER), "--mode", "ok"], timeout=100)
    assert codes == [0, 0], errs
    assert cycle_logs(tmp_path, "two") == ["cycle_0.node0.log", "cycle_0.node1.log"]
    seen = {}
    for k in (0, 1):
        text = (tmp_path / "logs" / "two" / f"cycle_0.node{k}.log").read_text()
        m = re.search(r"^\[rank(\d)\]: hello from rank \1 of 2 in cycle 0 pid \d+$", text, re.M)
        assert m, text
        seen[k] = int(m.group(1))
        assert f"[relaunch] cycle 0 start: job=two node={k} " in text
    assert sorted(seen.values()) == [0, 1]  # global ranks, one per node


def _db_verdict(tmp_path: Path, job: str, cycle: int, db: Path | None = None):  # type: ignore[no-untyped-def]
    from relaunch.storage import open_repository

    repo = open_repository(f"sqlite:///{db or tmp_path / 'home' / 'relaunch.db'}")
    try:
        return repo.get_cycle(job, cycle)
    finally:
        repo.close()


def test_node_failing_its_check_after_a_cycle_is_in_that_cycles_verdict(tmp_path: Path) -> None:
    """Cycle 0 crashes; before cycle 1 the node fails its check: exit 4, and cycle 0's
    verdict (database, audit artifact) records the node's health report."""
    import json
    import socket

    from tests._health_helpers import start_health_service
    from tests._launcher_helpers import engine_available

    if why := engine_available():
        pytest.skip(why)
    with start_health_service("fail_after_first") as endpoint:
        r = run_relaunch(
            tmp_path,
            job_args(tmp_path, "ill", "--ft-node-health-check-endpoint", endpoint)
            + [str(WORKER), "--mode", "crash_once"],
        )
    assert r.returncode == 4, r.stderr
    assert cycle_logs(tmp_path, "ill") == ["cycle_0.log"]
    host = socket.gethostname()
    written = tmp_path / "logs" / "ill" / "node_health" / f"{host}.cycle_1.json"
    assert f"node health report written to {written}" in r.stderr
    record = json.loads(written.read_text())
    assert (record["healthy"], record["ran_this_cycle"], record["excluded_from_cycle"]) == (
        False,
        True,
        1,
    )
    rec = _db_verdict(tmp_path, "ill", 0)
    assert rec.node_health[host]["reason"] == record["reason"]
    assert "ib check failed" in record["reason"]
    notes = rec.verdict["node_health"]
    assert [(n["node"], n["healthy"], n["failed_checks"]) for n in notes] == [
        (host, False, ["external_service"])
    ]
    assert f"Node {host} failed its health check and is left out of cycle 1" in rec.basis
    assert re.search(r"verdict cycle=0 decision=RESTART .*left out of cycle 1", r.stderr)
    audit = json.loads((tmp_path / "logs" / "audit" / "ill" / "cycle_0.json").read_text())
    assert audit["inputs"]["node_health"][0]["node"] == host


ELASTIC_WORKER = """
import os, signal, sys, time
import torch, torch.distributed as dist
from relaunch.launcher.client import heartbeat
marker = sys.argv[1]
heartbeat()
world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
if world == 1 and not os.path.exists(marker):
    # alone before the other node arrived: wait; elastic restarts us when it joins
    while os.getppid() != 1:  # orphaned (the test's launcher killed): end, do not linger
        time.sleep(0.5)
        heartbeat()
    sys.exit(1)
dist.init_process_group("gloo")
print(f"hello from rank {rank} of {world}", flush=True)
if world == 2 and rank == 1:
    open(marker, "w").write("crashed")
    os.kill(os.getpid(), signal.SIGKILL)
t = torch.ones(1)
dist.all_reduce(t)  # with 2 ranks, rank 0 fails here: its peer is gone
dist.destroy_process_group()
"""


def test_elastic_job_continues_without_the_unhealthy_node(tmp_path: Path) -> None:
    """--nnodes 1:2: in the first cycle with both nodes, rank 1 dies; one launcher's node
    then fails its health check and leaves; the other (the rendezvous host) runs the next
    cycle alone and succeeds; the crashed cycle's verdict names the node that left. Both
    nodes report to one `relaunch serve` (an elastic job that may span nodes is refused
    with the embedded engine, issue 23).

    Timing-free: the worker waits while it is alone before the crash (if the host's first
    round completes before the other node arrives, elastic restarts it when that node
    joins), and the leaving node leaves the round as soon as its check failed."""
    import json
    import socket
    import subprocess
    import sys

    from tests._health_helpers import start_health_service
    from tests._launcher_helpers import engine_available, relaunch_env
    from tests._service_helpers import running_service

    if why := engine_available():
        pytest.skip(why)
    script, marker = tmp_path / "elastic.py", tmp_path / "crashed"
    script.write_text(ELASTIC_WORKER)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def launcher(name: str, *extra: str) -> subprocess.Popen[str]:
        cmd = [
            sys.executable, "-m", "relaunch.cli", "run",
            "--nnodes", "1:2", "--nproc-per-node", "1",
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "el",
            # torch's dynamic rendezvous: both nodes active (scale-up); with the default
            # barrier rendezvous, --nnodes 1:2 makes the second node a hot spare
            # (tests/launcher/rdzv/test_rdzv_spares.py covers that case)
            "--ft-rdzv-impl", "c10d",
            "--rdzv-conf", "last_call_timeout=2",
            "--log-dir", str(tmp_path / "logs"), "--job-id", "el",
            "--ft-attribution-endpoint", svc.endpoint,
            "--workers-stop-timeout", "3", "--ft-gpu-health", "off", *extra,
            str(script), str(marker),
        ]  # fmt: skip
        return subprocess.Popen(
            cmd, cwd=tmp_path, env=relaunch_env(tmp_path), stderr=subprocess.PIPE, text=True
        )

    import time

    with (
        running_service(tmp_path, extra_args=("--node-wait", "60")) as svc,
        start_health_service("fail_after_first") as endpoint,
    ):
        # the first launcher hosts the c10d store: the one that stays must be the host
        well = launcher("well")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        # the preflight's path: no run-time round may ask the service (default every 5 s)
        sick = launcher(
            "sick", "--ft-node-health-check-endpoint", endpoint,
            "--ft-node-health-check-interval", "0",
        )  # fmt: skip
        errs = [p.communicate(timeout=200)[1] for p in (sick, well)]
    assert [sick.returncode, well.returncode] == [4, 0], errs
    job = tmp_path / "logs" / "el"
    by_cycle: dict[int, list[str]] = {}
    for name in cycle_logs(tmp_path, "el"):
        by_cycle.setdefault(int(re.match(r"cycle_(\d+)\.", name).group(1)), []).append(name)
    last = max(by_cycle)
    crashed = last - 1
    assert len(by_cycle[crashed]) == 2, by_cycle  # both nodes ran the cycle that crashed
    assert any("killed by signal SIGKILL" in (job / n).read_text() for n in by_cycle[crashed])
    (alone,) = by_cycle[last]
    survivor = (job / alone).read_text()
    assert "world_size=1" in survivor and "all ranks exited with code 0" in survivor
    (written,) = (job / "node_health").glob(f"node*.cycle_{last}.json")
    record = json.loads(written.read_text())
    assert record["node"] in ("node0", "node1") and record["healthy"] is False
    rec = _db_verdict(tmp_path, "el", crashed, Path(svc.db_url.removeprefix("sqlite:///")))
    assert [n["node"] for n in rec.verdict["node_health"]] == [record["node"]]
    assert rec.node_health[record["node"]]["excluded_from_cycle"] == last
