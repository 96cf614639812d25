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

from relaunch.launcher.rdzv_auth import ForgedValue, key_prefix, sign, verify
from relaunch.launcher.rdzv_store import RunStore
from tests._launcher_helpers import REPO, relaunch_env
from tests._rdzv_helpers import free_port, wait_listening

pytestmark = pytest.mark.timeout(300)

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
