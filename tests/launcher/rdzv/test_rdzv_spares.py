"""Hot spares through real processes: four `relaunch run` launchers on loopback form one
job with `--nnodes 2:4`; two are active, two wait as standbys. A node-specific failure
takes an active node out (its worker fails, then its health check): a standby takes its
place in the next round and the job completes, without the scheduler.

Outcomes never depend on timing: a round closes when every node still expected has
joined (the last-call window is 120 s and is never reached), nodes are ordered by their
infra group rank (`GROUP_RANK`), and the store host is the first launcher, started and
listening before the others."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests._rdzv_helpers import free_port, start_nodes, stop_all, wait_worker_pid

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def test_standby_replaces_a_failed_active_node(tmp_path: Path) -> None:
    from tests._health_helpers import start_health_service

    port = free_port()
    nodes = []
    fail = {"FAIL_NODE": "n1"}
    try:
        with start_health_service("fail_after_first") as endpoint:
            health = ("--ft-node-health-check-endpoint", endpoint, "--ft-node-health-check-interval", "0")  # fmt: skip
            # n0 hosts the store; n1 (not the host) checks its health
            start_nodes(
                nodes, tmp_path, port, "2:4", 4, env=fail,
                extra=lambda i: health if i == 1 else (),
            )  # fmt: skip
            codes = [n.wait() for n in nodes]
    finally:
        stop_all(nodes)
    out = {n.name: n.text() for n in nodes}
    assert codes == [0, 4, 0, 0], out
    # round 0: n0, n1 active (infra ranks 0, 1), n2, n3 standbys with reserved ranks 2, 3
    assert "rendezvous round 0: active, group rank 0 of 2 (2 standby)" in out["n0"]
    assert "rendezvous round 0: active, group rank 1 of 2 (2 standby)" in out["n1"]
    assert "rendezvous round 0: standby (hot spare), reserved rank 2" in out["n2"]
    assert "rendezvous round 0: standby (hot spare), reserved rank 3" in out["n3"]
    # n1's worker failed, then its health check: it left without closing the rendezvous
    assert "node unhealthy, not joining the rendezvous" in out["n1"]
    # round 1: n0 returns as rank 0; the first standby (n2) replaces n1 as rank 1; n3 stays
    assert "rendezvous round 1: active, group rank 0 of 2 (1 standby)" in out["n0"]
    assert "rendezvous round 1: active, group rank 1 of 2 (1 standby)" in out["n2"]
    assert "rendezvous round 1: standby (hot spare), reserved rank 2" in out["n3"]
    assert "standby: the job succeeded without needing this node" in out["n3"]
    # both active nodes name the same final cycle; the promoted spare ran only that one
    assert "job rz succeeded in cycle 1 (this node ran 2 cycle(s))" in out["n0"]
    assert "job rz succeeded in cycle 1 (this node ran 1 cycle(s))" in out["n2"]
    # which launcher ran which rank in which cycle: the workers' own lines
    logs = tmp_path / "logs" / "rz"
    ran = {}
    for log in sorted(logs.glob("cycle_*.log")):
        for m in re.finditer(r"node (n\d) runs rank (\d) of (\d) in cycle (\d)", log.read_text()):
            ran[(int(m.group(4)), int(m.group(2)))] = m.group(1)
    assert ran == {(0, 0): "n0", (0, 1): "n1", (1, 0): "n0", (1, 1): "n2"}, ran
    assert "cycle 0 log" not in out["n3"] and "cycle 1 log" not in out["n3"]


def test_standby_replaces_a_killed_launcher(tmp_path: Path) -> None:
    """SIGKILL of an active launcher that does not host the store (and of its worker, which
    a killed launcher would leave behind): its keep-alives stop; the surviving active node's
    worker fails in the collective, it comes back, and a standby fills the gap."""
    import os
    import signal

    port = free_port()
    env = {"HOLD_NODE": "n1", "PID_DIR": str(tmp_path)}
    fast = ("--rdzv-conf", "last_call_timeout=120,keep_alive_interval=1,keep_alive_max_attempt=3")
    nodes = []
    try:
        start_nodes(nodes, tmp_path, port, "2:3", 3, env=env, extra=fast)
        worker = wait_worker_pid(nodes, tmp_path / "n1.pid")  # n1's worker is up
        os.kill(nodes[1].proc.pid, signal.SIGKILL)
        os.kill(worker, signal.SIGKILL)
        codes = [nodes[0].wait(), nodes[1].wait(), nodes[2].wait()]
    finally:
        stop_all(nodes)
    out = {n.name: n.text() for n in nodes}
    assert codes == [0, -9, 0], out
    assert "rendezvous round 0: standby (hot spare), reserved rank 2" in out["n2"]
    assert "rendezvous round 1: active, group rank 0 of 2 (0 standby)" in out["n0"]
    assert "rendezvous round 1: active, group rank 1 of 2 (0 standby)" in out["n2"]
    ran = {}
    for log in sorted((tmp_path / "logs" / "rz").glob("cycle_1.*.log")):
        for m in re.finditer(r"node (n\d) runs rank (\d) of (\d) in cycle (\d)", log.read_text()):
            ran[int(m.group(2))] = m.group(1)
    assert ran == {0: "n0", 1: "n2"}, ran
    # the on-call view: each cycle log names the launcher (host, pid) that ran that group
    # rank, so cycle_1.node1.log is told apart from cycle_0.node1.log (another launcher)
    logs = tmp_path / "logs" / "rz"
    pids = {n.name: n.proc.pid for n in nodes}
    for log, name in (("cycle_0.node1.log", "n1"), ("cycle_1.node1.log", "n2")):
        assert f"launcher_pid={pids[name]}" in (logs / log).read_text(), log


def test_a_returning_active_node_keeps_its_place_over_the_standbys(tmp_path: Path) -> None:
    """n1's worker fails once (a local failure); n1 comes back to the rendezvous healthy:
    it stays active with its rank, both standbys stay standbys, the job completes."""
    port = free_port()
    env = {"FAIL_NODE": "n1"}
    nodes = []
    try:
        start_nodes(nodes, tmp_path, port, "2:4", 4, env=env)
        codes = [n.wait() for n in nodes]
    finally:
        stop_all(nodes)
    out = {n.name: n.text() for n in nodes}
    assert codes == [0, 0, 0, 0], out
    assert "rendezvous round 1: active, group rank 0 of 2 (2 standby)" in out["n0"]
    assert "rendezvous round 1: active, group rank 1 of 2 (2 standby)" in out["n1"]
    for name, rank in (("n2", 2), ("n3", 3)):
        assert f"rendezvous round 1: standby (hot spare), reserved rank {rank}" in out[name]
        assert "cycle 0 log" not in out[name] and "cycle 1 log" not in out[name]
    ran = {}
    for log in sorted((tmp_path / "logs" / "rz").glob("cycle_*.log")):
        for m in re.finditer(r"node (n\d) runs rank (\d) of (\d) in cycle (\d)", log.read_text()):
            ran[(int(m.group(4)), int(m.group(2)))] = m.group(1)
    assert ran == {(0, 0): "n0", (0, 1): "n1", (1, 0): "n0", (1, 1): "n1"}, ran
