"""Process-based rendezvous benchmark (`rdzv_bench.py --procs`): N real processes, each
one launcher's rendezvous handler without workers, against one store host (the driver
process of the trial, binding 127.0.0.1), for the barrier rendezvous and torch's c10d.

The node processes are forked from a driver that imported torch but holds no store yet,
so they start light (copy-on-write) and fast. Every node connects, waits at a common
barrier, then calls `next_rendezvous` (first round); after all returned, again (a
restart). The time of a phase is from the barrier's release to the last node's return
(CLOCK_MONOTONIC, one clock for all processes of the machine).

Also: the store host's measured operations per second (M client processes issuing
`check` on a busy store), which the op-count model uses to extrapolate to 1,024 and 4,096
nodes (`model`).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from datetime import timedelta
from typing import Any


def _node(impl: str, port: int, n: int, run_id: str, ready: Any, go: Any, out: Any) -> None:
    from torch.distributed import TCPStore
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous import registry as rdzv_registry

    os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"  # no workers: no workers' store
    params = RendezvousParameters("c10d", f"127.0.0.1:{port}", run_id, n, n,
                                  local_addr="127.0.0.1", is_host="false",
                                  read_timeout=600, join_timeout=600)  # fmt: skip
    if impl == "barrier":
        from relaunch.launcher.rdzv.barrier import BarrierRendezvousHandler

        client = TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=600))
        handler: Any = BarrierRendezvousHandler(params, store=client, secret=b"b" * 32)
    else:
        handler = rdzv_registry.get_rendezvous_handler(params)
    times = []
    for _phase in range(2):
        ready.wait()
        go.wait()
        handler.next_rendezvous()
        times.append(time.monotonic())
    out.put(times)
    ready.wait()  # nobody leaves (closing its connection) before all are done
    handler.shutdown()


def trial(impl: str, n: int) -> tuple[float, float]:
    """(first round s, restart s) with n node processes against one store host."""
    import uuid

    from torch.distributed import TCPStore

    from relaunch.launcher.rdzv.store import bound_listener

    ctx = mp.get_context("fork")
    listener = bound_listener("127.0.0.1", 0)
    port = listener.getsockname()[1]
    ready, go, out = ctx.Barrier(n + 1), ctx.Barrier(n + 1), ctx.Queue()
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    # the nodes fork before this process holds a store (no threads to copy)
    procs = [ctx.Process(target=_node, args=(impl, port, n, run_id, ready, go, out))
             for _ in range(n)]  # fmt: skip
    for p in procs:
        p.start()
    host = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                    master_listen_fd=listener.detach(), timeout=timedelta(seconds=600),
                    use_libuv=True)  # fmt: skip
    starts = []
    for _phase in range(2):
        ready.wait(timeout=900)
        go.wait(timeout=60)
        starts.append(time.monotonic())
    done = [out.get(timeout=900) for _ in range(n)]
    ready.wait(timeout=60)
    for p in procs:
        p.join(60)
    del host
    first = max(t[0] for t in done) - starts[0]
    again = max(t[1] for t in done) - starts[1]
    return first, again


def _hammer(port: int, seconds: float, out: Any) -> None:
    from torch.distributed import PrefixStore, TCPStore

    s = PrefixStore("relaunch/rdzv/x", TCPStore("127.0.0.1", port, is_master=False,
                                                  timeout=timedelta(seconds=60)))  # fmt: skip
    s.set("k", "v")
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        s.check(["round/0/decided"])
        n += 1
    out.put(n)


def store_ops_per_s(clients: int = 8, seconds: float = 3.0) -> float:
    """Operations per second one store host serves to `clients` processes polling it."""
    from torch.distributed import TCPStore

    from relaunch.launcher.rdzv.store import bound_listener

    ctx = mp.get_context("fork")
    listener = bound_listener("127.0.0.1", 0)
    port = listener.getsockname()[1]
    out = ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(port, seconds, out)) for _ in range(clients)]
    for p in procs:
        p.start()
    host = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                    master_listen_fd=listener.detach(), timeout=timedelta(seconds=60),
                    use_libuv=True)  # fmt: skip
    total = sum(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
    del host
    return total / seconds


# Store operations per node per round, from tests/launcher/rdzv/test_rdzv_ops.py (the counting proxy):
# a node's join and wake-up, the closer's extra work, all independent of N.
OPS_JOIN = {"first": 9, "restart": 11}
OPS_CLOSER = {"first": 15, "restart": 22}


def model(n: int, ops_per_s: float, phase: str) -> float:
    """Seconds for one round at n nodes from the op counts and the host's ops/s: every
    node's fixed operations go through the one store host, plus the pollers' load on it
    while the round gathers (at most POLLS_PER_S polls/s in all), plus one last poll
    interval for the last waiter to see the result (the poll backoff's cap)."""
    from relaunch.launcher.rdzv.barrier import POLLS_PER_S

    work = n * OPS_JOIN[phase] + OPS_CLOSER[phase] + 2 * n  # + the closer's 2n keys read
    cap = max(0.1, n / POLLS_PER_S)
    capacity = ops_per_s - min(POLLS_PER_S, n / 0.1)  # what the polls leave for the work
    return work / capacity + cap
