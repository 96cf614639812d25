"""Chaos probes of the barrier rendezvous through real `relaunch run` launchers on
loopback: what every launcher does when the store host dies, when the store is never
reachable, and which `--rdzv-conf` values are refused. Each launcher must end with a
one-line reason and a documented exit code; nothing here depends on timing (the waits
are generous bounds on events, never assertions about speed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._launcher_helpers import relaunch_env
from tests._rdzv_helpers import RDZV_WORKER, free_port, start_nodes, stop_all, wait_worker_pid
from tests.launcher.rdzv.test_rdzv_config import MULTI, _usage_error

pytestmark = pytest.mark.timeout(400)


@pytest.mark.parametrize(
    ("conf", "says"),
    [
        ("keep_alive_interval=nan", "keep_alive_interval='nan': not a finite number"),
        ("keep_alive_interval=inf", "keep_alive_interval='inf': not a finite number"),
        ("is_host=maybe", "is_host='maybe': not a boolean (true or false)"),
    ],
)
def test_rdzv_conf_values_that_would_break_the_rendezvous(
    tmp_path: Path, conf: str, says: str
) -> None:
    """nan keep-alives made every node look dead (nan compares false), inf never expires;
    a bad is_host was a traceback with exit 1 from torch's parser."""
    line = _usage_error(tmp_path, ["--nnodes", "2:4", "--rdzv-conf", conf, *MULTI])
    assert f"--rdzv-conf {says}" in line, line


def test_unreachable_store_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """A node that is not the store host and finds no store (nobody listens on the
    endpoint): one line naming the endpoint, exit 6, no worker started."""
    port = free_port()
    r = subprocess.run(
        [
            sys.executable, "-m", "relaunch.cli", "run", "--nnodes", "2",
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-conf", "is_host=false,read_timeout=2",
            "--ft-attribution-endpoint", "off", "--ft-gpu-health", "off",
            "--log-dir", str(tmp_path / "logs"), str(RDZV_WORKER),
        ],
        cwd=tmp_path, env=relaunch_env(tmp_path), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    out = r.stdout + r.stderr
    assert r.returncode == 6, out  # EXIT_RENDEZVOUS, not 1 (budget spent)
    assert "Traceback" not in out, out
    assert f"relaunch: error: cannot reach the rendezvous store at 127.0.0.1:{port}" in out, out
    assert "no worker was started" in out, out


def test_every_node_ends_when_the_store_host_dies(tmp_path: Path) -> None:
    """The store host (n0, active) is SIGKILLed with its worker while n1 is active and n2
    waits as a hot spare: both end (no hang), exit 6 (the rendezvous failed), with one
    line saying the store was lost instead of a C++/Python traceback."""
    port = free_port()
    env = {"HOLD_NODE": "n0", "PID_DIR": str(tmp_path)}
    fast = ("--rdzv-conf", "last_call_timeout=120,keep_alive_interval=1,keep_alive_max_attempt=3")
    nodes = []
    try:
        start_nodes(nodes, tmp_path, port, "2:3", 3, env=env, extra=fast)
        worker = wait_worker_pid(nodes, tmp_path / "n0.pid")  # n0's worker is up
        # n2 is a standby by then (round 0 closed before n0's worker started)
        os.kill(nodes[0].proc.pid, signal.SIGKILL)
        os.kill(worker, signal.SIGKILL)
        codes = [n.wait(timeout=300) for n in nodes[1:]]
    finally:
        stop_all(nodes)
    out = {n.name: n.text() for n in nodes}
    assert codes == [6, 6], out  # EXIT_RENDEZVOUS, not 1 (budget spent)
    assert "rendezvous round 0: standby (hot spare), reserved rank 2" in out["n2"]
    for name in ("n1", "n2"):
        launcher_lines = [ln for ln in out[name].splitlines() if not ln.startswith("[rank")]
        assert not any(ln.startswith("Traceback") for ln in launcher_lines), out[name]
        assert (
            f"relaunch: rendezvous failed on this node: lost the rendezvous store at "
            f"127.0.0.1:{port}" in out[name]
        ), out[name]


def test_a_duplicate_infra_rank_fails_the_round_on_every_node() -> None:
    """docs: two nodes with the same infra rank fail the rendezvous on every node. The
    first node that saw the duplicate used to fail alone and leave; the duplicate that
    remained then joined the job as if nothing happened (which of the two ran was an
    accident of timing). Now the error is the round's result: every participant, and a
    node arriving later, fails with the same line."""
    from datetime import timedelta

    from torch.distributed import TCPStore
    from torch.distributed.elastic.rendezvous import RendezvousError

    from tests.launcher.rdzv.test_rdzv_barrier import Cluster

    server = TCPStore("127.0.0.1", 0, is_master=True, multi_tenant=True,
                      timeout=timedelta(seconds=30))  # fmt: skip
    c = Cluster(server, 2, 4, last_call_timeout=0)
    try:
        from relaunch.launcher.rdzv.store import LEFT, Keys
        from tests._rdzv_helpers import ghost_join

        first = c.handler(infra_rank=0)
        tf = c.join(first)
        while c.view.add(Keys.arrived(0), 0) < 1:  # it holds slot 0: the round's leader
            time.sleep(0.01)
        dups = []
        for node in ("dupA", "dupB"):  # two live launchers both claiming infra rank 1
            dups.append(ghost_join(c.view, 0, node, beat=time.time() + 3600, infra_rank=1))
        tf.join(60)
        assert isinstance(c.results[0], RendezvousError), c.results[0]
        assert "duplicate infra group rank 1" in str(c.results[0])
        c.view.write(Keys.heartbeat(0, dups[1]), LEFT)  # one duplicate gives up
        later = c.handler(infra_rank=2)
        c.join(later).join(60)
        assert isinstance(c.results[1], RendezvousError), c.results[1]
        assert "duplicate infra group rank 1" in str(c.results[1])
    finally:
        c.close()


def test_a_restarted_launcher_is_not_a_duplicate_of_its_dead_incarnation() -> None:
    """A launcher killed mid-rendezvous and restarted by the scheduler keeps its infra
    rank (same SLURM_PROCID); its dead incarnation still counts as alive until its
    keep-alive expires. That used to fail the round as a duplicate infra rank. Now the
    round waits for the stale keep-alive to expire (the dead one never renews it) and
    closes with the new incarnation."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    from tests._rdzv_helpers import ghost_join
    from tests.launcher.rdzv.test_rdzv_barrier import Cluster

    server = TCPStore("127.0.0.1", 0, is_master=True, multi_tenant=True,
                      timeout=timedelta(seconds=30))  # fmt: skip
    c = Cluster(server, 2, 2, keep_alive_interval=1, keep_alive_max_attempt=3)
    try:
        # the dead incarnation of infra rank 1: a fresh keep-alive, never renewed
        ghost_join(c.view, 0, "old-n1", beat=time.time(), infra_rank=1)
        # the restarted n1 joins first (it sees only its stale twin), then n0: whatever
        # the interleaving, the duplicate lasts until the stale keep-alive expires
        n1 = c.handler(infra_rank=1)
        t1 = c.join(n1)
        n0 = c.handler(infra_rank=0)
        t0 = c.join(n0)
        t1.join(120)
        t0.join(120)
        assert not isinstance(c.results[0], Exception), c.results[0]
        assert not isinstance(c.results[1], Exception), c.results[1]
        assert (c.results[0].rank, c.results[1].rank) == (1, 0)
        assert c.results[0].world_size == 2
    finally:
        c.close()
