"""The workers' store is hosted by the launcher (`launcher.rdzv.worker_store`), one per round.

Unit: the host binds a real TCPStore before it publishes the port, the other group ranks
read the same port, a new round gets a fresh store and the old one is closed, a server that
cannot start falls back to worker rank 0 with a warning, and
`TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` turns it off. End to end: a real `relaunch run` whose workers find the store listening before
rank 0 reaches `init_process_group`, no key of the cycle before after a restart, and a
working all-reduce.
"""

from __future__ import annotations

import re
import socket
from datetime import timedelta
from pathlib import Path

import pytest
from torch.distributed import DistNetworkError, PrefixStore, TCPStore

from relaunch.launcher.rdzv.worker_store import WorkerStoreHost
from tests._launcher_helpers import REPO, job_args, read_log, run_relaunch

PROBE = REPO / "tests" / "workers" / "store_probe_job.py"


@pytest.fixture
def rdzv_store() -> TCPStore:
    return TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                    timeout=timedelta(seconds=30))  # fmt: skip


def _client(port: int) -> TCPStore:
    return TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=30))


def test_group_rank_zero_hosts_the_round_store_and_publishes_its_port(rdzv_store):
    round0 = PrefixStore("round/0/", rdzv_store)
    host, other = WorkerStoreHost(shared=True), WorkerStoreHost(shared=True)
    info = host.bootstrap(0, round0, "127.0.0.1")
    assert info.master_port == host.port  # the port published is the one already bound
    client = _client(info.master_port)  # listening: a worker connects as a client
    client.set("k", "v")
    assert other.bootstrap(1, round0, "127.0.0.1").master_port == info.master_port
    assert other.port is None  # only group rank 0 hosts

    next_info = host.bootstrap(0, PrefixStore("round/1/", rdzv_store), "127.0.0.1")
    fresh = _client(next_info.master_port)
    assert not fresh.check(["k"])  # a restarted cycle never reads the keys of the one before


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
    except ConnectionRefusedError:
        return True
    return False


def test_the_old_server_is_gone_once_the_launcher_moves_on(rdzv_store):
    host = WorkerStoreHost(shared=True)
    old = host.bootstrap(0, PrefixStore("round/0/", rdzv_store), "127.0.0.1").master_port
    client = _client(old)  # a worker of round 0 still connected does not keep it alive
    new = host.bootstrap(0, PrefixStore("round/1/", rdzv_store), "127.0.0.1").master_port
    if new != old:  # the kernel may hand the freed number out again
        assert _refused(old)
    host.close()  # standby, or shutdown
    assert host.port is None and _refused(new)
    del client


def test_a_server_that_cannot_start_falls_back_to_worker_rank_zero_with_a_warning(rdzv_store):
    def cannot_connect_to_itself(**_kw: object) -> TCPStore:
        raise DistNetworkError("failed to connect to node0.example:0 (timed out)")

    warnings: list[str] = []
    host = WorkerStoreHost(shared=True, warn=warnings.append,
                           server_factory=cannot_connect_to_itself)  # fmt: skip
    info = host.bootstrap(0, PrefixStore("round/0/", rdzv_store), "127.0.0.1")
    assert host.shared is False and host.port is None  # workers are told: rank 0 hosts
    assert 0 < info.master_port < 65536 and info.master_addr == "127.0.0.1"
    assert warnings == [
        "cannot host the workers' store at 127.0.0.1 (failed to connect to node0.example:0 "
        "(timed out)); worker rank 0 hosts it this round"
    ]
    # an address that is not this machine's cannot be bound: the same fallback
    warnings.clear()
    info = host.bootstrap(0, PrefixStore("round/0b/", rdzv_store), "node0.invalid")
    assert host.shared is False and info.master_addr == "node0.invalid"
    assert len(warnings) == 1 and warnings[0].startswith(
        "cannot host the workers' store at node0.invalid ("
    )
    host._server_factory = TCPStore  # the next round tries again
    host.bootstrap(0, PrefixStore("round/1/", rdzv_store), "127.0.0.1")
    assert host.shared is True and host.port is not None


def test_the_workers_store_listens_on_the_nodes_address_only(rdzv_store):
    """Bound to the job's interface (issue 26): reachable on 127.0.0.1, refused on another
    loopback address of the same machine (torch's own server listens on all of them)."""
    host = WorkerStoreHost(shared=True)
    port = host.bootstrap(0, PrefixStore("round/0/", rdzv_store), "127.0.0.1").master_port
    _client(port).set("k", "v")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.2", port), timeout=10).close()
    host.close()


def test_a_name_that_resolves_to_loopback_only_here_binds_every_interface() -> None:
    """Other nodes reach such a name (a Debian-style `127.0.1.1 node0` hosts line) on its
    real address: binding loopback would lock them out. Written loopback binds loopback."""
    from relaunch.launcher.rdzv.store import bound_listener

    name = socket.gethostname()
    here = socket.getaddrinfo(name, 0, type=socket.SOCK_STREAM)[0][4][0]
    if not here.startswith("127."):
        pytest.skip(f"this machine's name {name} resolves to {here}, not loopback")
    with bound_listener(name, 0) as wide, bound_listener("127.0.0.1", 0) as narrow:
        assert wide.getsockname()[0] == "0.0.0.0"
        assert narrow.getsockname()[0] == "127.0.0.1"


def test_disabled_by_torch_env_leaves_the_port_to_worker_rank_zero(rdzv_store, monkeypatch):
    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    host = WorkerStoreHost()
    assert host.shared is False
    info = host.bootstrap(0, PrefixStore("round/0/", rdzv_store), "127.0.0.1")
    assert host.port is None
    assert 0 < info.master_port < 65536


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_workers_find_the_launchers_store_and_a_restart_gets_a_fresh_one(tmp_path: Path):
    r = run_relaunch(
        tmp_path,
        job_args(tmp_path, "store", "--ft-attribution-endpoint", "off", "--max-restarts", "2")
        + [str(PROBE)],
        timeout=150,
    )
    assert r.returncode == 0, r.stderr
    for cycle in (0, 1):
        log = read_log(tmp_path, "store", cycle)
        assert f"cycle {cycle}: the store was listening before init" in log
        assert re.search(rf"rank 0 cycle {cycle} shared=True port=\d+", log), log
        for rank in (0, 1):
            assert f"rank {rank} cycle {cycle} keys of earlier cycles: []" in log
    assert "rank 1 fails in cycle 0" in read_log(tmp_path, "store", 0)
    log1 = read_log(tmp_path, "store", 1)
    assert "rank 0 all-reduce 2" in log1 and "rank 1 all-reduce 2" in log1
