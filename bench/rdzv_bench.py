"""Rendezvous time of the barrier rendezvous against torch's c10d dynamic rendezvous.

For N simulated nodes (2, 4, 8; threads of one process, each with its own handler and its
own TCPStore client, the first hosting the store, on loopback), the time from a common
start to the moment every node has its rank, for: the first rendezvous of a job (round 0),
and a re-rendezvous after a failure (every node calls `next_rendezvous` again). Both
implementations run under the same conditions, trials interleaved; the figures are
medians, and the ratios (barrier / torch) are what to read.

    python bench/rdzv_bench.py [--trials 5] [--nodes 2,4,8]

With `--procs`, N real processes instead of threads (`bench/rdzv_procs.py`), one trial per
size by default, plus the store host's measured operations per second and the op-count
model extrapolated to 1,024 and 4,096 nodes:

    python bench/rdzv_bench.py --procs --nodes 32,64,128 [--trials 1]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous import registry as rdzv_registry

from relaunch.launcher.rdzv.barrier import BarrierRendezvousHandler

# As `relaunch run`: the barrier's group rank 0 binds the workers' store of each round
# (launcher.rdzv.worker_store) unless TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 is set; torch's handler
# binds its own once.


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _params(port: int, run_id: str, n: int) -> RendezvousParameters:
    # torch's default last-call window (30 s) is never reached: MAX = N nodes close at once
    return RendezvousParameters("c10d", f"127.0.0.1:{port}", run_id, n, n, local_addr="127.0.0.1")


def _barrier(port: int, run_id: str, n: int) -> Any:
    return BarrierRendezvousHandler(_params(port, run_id, n))


def _torch(port: int, run_id: str, n: int) -> Any:
    return rdzv_registry.get_rendezvous_handler(_params(port, run_id, n))


def _all(handlers: list[Any]) -> float:
    """Every handler calls next_rendezvous at once; seconds until the last one returns."""
    start = threading.Barrier(len(handlers) + 1)
    errors: list[BaseException] = []

    def node(h: Any) -> None:
        start.wait()
        try:
            h.next_rendezvous()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=node, args=(h,), daemon=True) for h in handlers]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join(120)
    if errors:
        raise RuntimeError(f"rendezvous failed: {errors[0]!r}")
    return time.perf_counter() - t0


def trial(make: Callable[[int, str, int], Any], n: int) -> tuple[float, float]:
    port, run_id = _free_port(), f"bench-{uuid.uuid4().hex[:8]}"
    handlers = [make(port, run_id, n)]  # the first one hosts the store
    handlers += [make(port, run_id, n) for _ in range(n - 1)]
    first = _all(handlers)
    again = _all(handlers)  # a restart: every node comes back
    for h in handlers:
        h.shutdown()
    return first, again


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=0, help="default 5, 1 with --procs")
    ap.add_argument("--nodes", default="2,4,8")
    ap.add_argument("--procs", action="store_true", help="N real processes, not threads")
    args = ap.parse_args(argv)
    args.trials = args.trials or (1 if args.procs else 5)
    if args.procs:
        return procs_main(args)
    print(f"{'nodes':>5} {'phase':>8} {'barrier ms':>11} {'torch c10d ms':>14} {'ratio':>6}")
    for n in (int(x) for x in args.nodes.split(",")):
        res: dict[str, list[tuple[float, float]]] = {"barrier": [], "torch": []}
        for _ in range(args.trials):  # interleaved
            res["barrier"].append(trial(_barrier, n))
            res["torch"].append(trial(_torch, n))
        for i, phase in enumerate(("first", "restart")):
            b = statistics.median(r[i] for r in res["barrier"]) * 1e3
            t = statistics.median(r[i] for r in res["torch"]) * 1e3
            print(f"{n:>5} {phase:>8} {b:>11.1f} {t:>14.1f} {b / t:>6.3f}", flush=True)
    return 0


def procs_main(args: argparse.Namespace) -> int:
    import rdzv_procs

    print(f"{'nodes':>5} {'phase':>8} {'barrier ms':>11} {'torch c10d ms':>14} {'ratio':>6}")
    for n in (int(x) for x in args.nodes.split(",")):
        res: dict[str, list[tuple[float, float]]] = {"barrier": [], "torch": []}
        for _ in range(args.trials):  # interleaved
            res["barrier"].append(rdzv_procs.trial("barrier", n))
            res["torch"].append(rdzv_procs.trial("torch", n))
        for i, phase in enumerate(("first", "restart")):
            b = statistics.median(r[i] for r in res["barrier"]) * 1e3
            t = statistics.median(r[i] for r in res["torch"]) * 1e3
            print(f"{n:>5} {phase:>8} {b:>11.1f} {t:>14.1f} {b / t:>6.3f}", flush=True)
    ops = rdzv_procs.store_ops_per_s()
    print(f"store host: {ops:,.0f} ops/s (8 client processes polling, loopback)")
    for n in (1024, 4096):
        first, again = (rdzv_procs.model(n, ops, p) for p in ("first", "restart"))
        print(f"model {n:>5} nodes: first round {first:.2f} s, restart {again:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
