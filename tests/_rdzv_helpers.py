"""Helpers of the rendezvous tests: several `relaunch run` launchers on loopback, each one
a node, their console captured in a file per launcher."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from relaunch.launcher.rdzv.store import LEFT, Keys, RunStore, dumps
from tests._launcher_helpers import REPO, relaunch_env

RDZV_WORKER = REPO / "tests" / "workers" / "rdzv_job.py"
SECRET = b"tests-secret-of-the-rendezvous-0123456789"


def ghost_join(
    view: RunStore,
    r: int,
    node_id: str,
    *,
    beat: float,
    left: bool = False,
    infra_rank: int | None = None,
) -> int:
    """A participant written straight into round r as a launcher joins (slot, descriptor,
    keep-alive, arrival): one that then died (keep-alive far in the past), left, or is
    alive elsewhere (a keep-alive in the future). Returns its slot."""
    slot = view.add(Keys.count(r), 1) - 1
    desc = {"node_id": node_id, "addr": "zz", "pid": 1, "infra_rank": infra_rank,
            "segment": None, "was_active": False}  # fmt: skip
    view.write_many({Keys.participant(r, slot): dumps(desc),
                     Keys.heartbeat(r, slot): LEFT if left else repr(beat)})  # fmt: skip
    view.add(Keys.arrived(r), 1)
    return slot


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[bytes], limit_s: float = 120) -> None:
    """Until the store host accepts connections (or it died): an event, bounded."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"the store host never listened on {port} (exit {proc.poll()})")


@dataclass
class Node:
    name: str
    proc: subprocess.Popen[bytes]
    console: Path

    def wait(self, timeout: float = 240) -> int:
        return self.proc.wait(timeout=timeout)

    def text(self) -> str:
        return self.console.read_text(errors="replace")


def start_node(
    tmp_path: Path,
    name: str,
    port: int,
    nnodes: str,
    *,
    group_rank: int | None = None,
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    log_dir: Path | None = None,
    job: str = "rz",
    worker: Path = RDZV_WORKER,
) -> Node:
    cmd = [
        sys.executable, "-m", "relaunch.cli", "run",
        "--nnodes", nnodes, "--nproc-per-node", "1",
        "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", job,
        # rounds close when every expected node arrived; the window only bounds a wait
        # for nodes that never come
        "--rdzv-conf", "last_call_timeout=120",
        "--log-dir", str(log_dir or tmp_path / "logs"), "--job-id", job,
        "--ft-attribution-endpoint", "off", "--ft-gpu-health", "off",
        "--workers-stop-timeout", "3", "--max-restarts", "3", *extra,
        str(worker),
    ]  # fmt: skip
    full_env = relaunch_env(tmp_path)
    full_env["TEST_NODE"] = name
    full_env["RELAUNCH_JOB_SECRET"] = SECRET.decode()  # as a scheduler sets it on every node
    if group_rank is not None:
        full_env["GROUP_RANK"] = str(group_rank)
        cmd.insert(cmd.index("--log-dir"), "--ft-use-infra-group-rank")
    full_env.update(env or {})
    console = tmp_path / f"{name}.console"
    with open(console, "wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=tmp_path, env=full_env, stdout=out, stderr=subprocess.STDOUT
        )
    return Node(name, proc, console)


def stop_all(nodes: list[Node]) -> None:
    for n in nodes:
        if n.proc.poll() is None:
            n.proc.kill()
            n.proc.wait(timeout=30)


def start_nodes(
    nodes: list[Node],
    tmp_path: Path,
    port: int,
    nnodes: str,
    count: int,
    *,
    env: Callable[[int], dict[str, str]] | dict[str, str] | None = None,
    extra: Callable[[int], tuple[str, ...]] | tuple[str, ...] = (),
    log_dir: Callable[[int], Path] | Path | None = None,
    job: str = "rz",
    worker: Path = RDZV_WORKER,
) -> None:
    """Start nodes n0..n{count-1} with infra group ranks 0..count-1: n0 first (it hosts the
    store), the others once it listens. Each is appended to `nodes` as it starts, so the
    caller's `stop_all(nodes)` in a `finally` sees every launcher even if a start fails.
    `env` / `extra` / `log_dir` are the same for every node or a function of the node's
    index; `job` and `worker` go to every node (see `start_node`)."""
    for i in range(count):
        node = start_node(
            tmp_path,
            f"n{i}",
            port,
            nnodes,
            group_rank=i,
            env=env(i) if callable(env) else env,
            extra=extra(i) if callable(extra) else extra,
            log_dir=log_dir(i) if callable(log_dir) else log_dir,
            job=job,
            worker=worker,
        )
        nodes.append(node)
        if i == 0:
            wait_listening(port, node.proc)


def wait_worker_pid(nodes: list[Node], pid_file: Path, limit_s: float = 240) -> int:
    """The pid a node's worker wrote to `pid_file` once it is up (the test fails with every
    console when it never comes)."""
    deadline = time.monotonic() + limit_s
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid_file.exists(), {n.name: n.text() for n in nodes}
    return int(pid_file.read_text())


OPS_TAG = threading.local()  # `now`: a phase that this thread's next operations count under


class CountingStore:
    """A counting proxy in front of a handler's run store (`RunStore.store`, the real
    TCPStore behind it): every operation is one call here and one round trip there.
    Records (node, phase, operation, first key) in a shared list."""

    def __init__(self, inner: object, node: int, log: list[tuple[int, str, str, str]],
                 phase: dict[str, str]) -> None:  # fmt: skip
        self._inner, self._node, self._log, self._phase = inner, node, log, phase

    def __getattr__(self, name: str) -> object:
        fn = getattr(self._inner, name)
        if not callable(fn):
            return fn

        def counted(*args: object, **kw: object) -> object:
            first = args[0] if args else ""
            key = str(first[0] if isinstance(first, list) and first else first)
            phase = getattr(OPS_TAG, "now", None) or self._phase["now"]
            self._log.append((self._node, phase, name, key))
            return fn(*args, **kw)

        return counted


def is_poll(op: str, key: str) -> bool:
    """A waiter's poll: one `check` of its round's wake key."""
    return op == "check" and key.endswith(("/decided", "/end"))
