"""The rendezvous store's trust boundary (issue 26, item 1) through a real `relaunch run`.

A job whose workers fail in every cycle (budget spent: exit 1) is attacked while its
first cycle runs by a process without the job's secret: it writes every outcome key at
the addresses the rendezvous used before (`relaunch/rdzv/<job>/closed` = `succeeded`, a
round result, the round number) and even a value under the job's real prefix (which
only a holder of the secret can compute: the test computes it from the secret to show
the signature check too). The job still ends failed with exit 1. The store refuses
connections on another address of the machine (127.0.0.2): it is bound to 127.0.0.1.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from torch.distributed import PrefixStore, TCPStore

from relaunch.launcher.rdzv.auth import ForgedValue, key_prefix, sign, verify
from relaunch.launcher.rdzv.store import RunStore
from tests._launcher_helpers import REPO, relaunch_env
from tests._rdzv_helpers import free_port, wait_listening

pytestmark = pytest.mark.timeout(300)

STORE_WORKER = REPO / "tests" / "workers" / "store_outsider_job.py"

ATTACK_WORKER = REPO / "tests" / "workers" / "rdzv_attack_job.py"
SECRET = "attack-test-secret-0123456789abcdef"


def _attack(port: int, job: str) -> None:
    """What anyone who reaches the port can do with torch's protocol."""
    store = TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=30))
    old = PrefixStore(f"relaunch/rdzv/{job}", store)  # the layout before issue 26
    for key, value in [("closed", "succeeded"), ("round", "7"),
                       ("round/0/result", '{"round":0,"nodes":[]}'),
                       ("round/1/result", '{"round":1,"nodes":[]}')]:  # fmt: skip
        old.set(key, value)
    # under the real prefix (an attacker cannot compute it), unsigned: refused on read
    real = PrefixStore(key_prefix(SECRET.encode(), job), store)
    real.set("closed/acks", "x\n")


def test_an_outsider_cannot_change_the_jobs_outcome(tmp_path: Path) -> None:
    port, job = free_port(), "atk"
    env = relaunch_env(tmp_path)
    env.update(UP_FILE=str(tmp_path / "up"), GO_FILE=str(tmp_path / "go"))
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    cmd = [
        sys.executable, "-m", "relaunch.cli", "run", "--nnodes", "1", "--nproc-per-node", "1",
        "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", job, "--job-id", job,
        "--ft-job-secret-file", str(secret_file),
        "--log-dir", str(tmp_path / "logs"), "--ft-attribution-endpoint", "off",
        "--ft-gpu-health", "off", "--max-restarts", "1", str(ATTACK_WORKER),
    ]  # fmt: skip
    console = tmp_path / "console"
    with open(console, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_listening(port, proc)
        deadline = time.monotonic() + 200
        while not (tmp_path / "up").exists() and time.monotonic() < deadline:
            assert proc.poll() is None, console.read_text()
            time.sleep(0.05)
        with pytest.raises(ConnectionRefusedError):  # bound to the job's interface only
            socket.create_connection(("127.0.0.2", port), timeout=10).close()
        _attack(port, job)
        (tmp_path / "go").write_text("")
        code = proc.wait(timeout=200)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    text = console.read_text(errors="replace")
    assert code == 1, text  # budget spent: failed, as without the attack
    assert "succeeded" not in text and "closed by another node" not in text, text


def test_a_value_without_a_valid_signature_is_refused() -> None:
    server = TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=30))
    mine = RunStore(server, "job", b"s" * 32)
    mine.write("closed", "failed")
    assert mine.read("closed") == "failed"
    mine.store.set("closed", "succeeded")  # unsigned
    with pytest.raises(ForgedValue):
        mine.read("closed")
    forged = sign(b"t" * 32, "closed", "succeeded")  # signed with another secret
    mine.store.set("closed", forged)
    with pytest.raises(ForgedValue):
        mine.read("closed")
    # a signature is bound to its key: a value moved to another key does not verify
    with pytest.raises(ForgedValue):
        verify(b"s" * 32, "round/0/result", sign(b"s" * 32, "closed", "x").encode())
    assert RunStore(server, "job", b"t" * 32).prefix != mine.prefix  # unaddressable


def _connects_from(source: str, dest: tuple[str, int]) -> bool:
    """Whether a TCP connection from `source` to `dest` is established (3 s given: an
    attempt the accept filter drops never is, however long it waits)."""
    with socket.socket() as s:
        s.bind((source, 0))
        s.settimeout(3.0)
        try:
            s.connect(dest)
        except OSError:
            return False
        return True


def test_an_outsider_cannot_reach_the_workers_store_of_a_multi_node_job(tmp_path: Path) -> None:
    """Two real launchers on 127.0.0.1 (the job's secret from the environment): their
    workers join the process group through the workers' store and all-reduce; meanwhile a
    client from 127.0.0.2 (another host on the job network) cannot connect to that store,
    so it can neither read nor write it, while 127.0.0.1 still can."""
    from tests._rdzv_helpers import start_node, stop_all

    try:
        with socket.socket() as s:
            s.bind(("127.0.0.2", 0))
    except OSError:
        pytest.skip("127.0.0.2 cannot be bound here")
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    nodes: list = []
    try:
        for i in range(2):  # node 0 first: it hosts the rendezvous store
            nodes.append(
                start_node(
                    tmp_path, f"n{i}", port, "2", group_rank=i, worker=STORE_WORKER,
                    env={"STORE_OUT": str(out)}, extra=("--max-restarts", "0"),
                )
            )  # fmt: skip
            if i == 0:
                wait_listening(port, nodes[0].proc)
        master = out / "master"
        deadline = time.monotonic() + 240
        while not master.exists() and time.monotonic() < deadline:
            assert all(n.proc.poll() is None for n in nodes), [n.text() for n in nodes]
            time.sleep(0.1)
        assert master.exists(), [n.text() for n in nodes]
        addr, mport, total = master.read_text().split()
        assert (addr, total) == ("127.0.0.1", "2")  # both nodes' workers used the store
        assert not _connects_from("127.0.0.2", (addr, int(mport)))
        assert _connects_from("127.0.0.1", (addr, int(mport)))  # the store is there
        (out / "go").touch()
        codes = [n.wait(timeout=240) for n in nodes]
        assert codes == [0, 0], [n.text() for n in nodes]
    finally:
        stop_all(nodes)
