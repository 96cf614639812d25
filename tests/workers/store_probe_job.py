"""A worker that checks where its torch.distributed store lives (tests/launcher/rdzv/test_worker_store.py).

Before `init_process_group`, rank 0 connects to MASTER_ADDR:MASTER_PORT: the launcher must
already be listening there (it hosts the store; rank 0 no longer binds it). Every rank
writes a key of its own cycle straight into that store and looks for one left by the cycle
before (none may be there: each cycle gets a fresh store). In cycle 0 rank 1 then fails so
that the launcher restarts the job; cycle 1 ends with an all-reduce and exit 0.
"""

from __future__ import annotations

import os
import socket
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> int:
    rank = int(os.environ["RANK"])
    cycle = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    shared = os.environ.get("TORCHELASTIC_USE_AGENT_STORE")
    print(f"store probe: rank {rank} cycle {cycle} shared={shared} port={port}", flush=True)
    if rank == 0:
        with socket.create_connection((addr, port), timeout=30):
            print(f"store probe: cycle {cycle}: the store was listening before init", flush=True)
    client = dist.TCPStore(addr, port, is_master=False, timeout=timedelta(seconds=60))
    left_over = [c for c in range(cycle) if client.check([f"probe/cycle{c}/rank{rank}"])]
    print(f"store probe: rank {rank} cycle {cycle} keys of earlier cycles: {left_over}", flush=True)
    client.set(f"probe/cycle{cycle}/rank{rank}", "1")
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    if cycle == 0 and rank == 1:
        print("store probe: rank 1 fails in cycle 0", flush=True)
        return 3
    if cycle > 0:
        t = torch.ones(1)
        dist.all_reduce(t)
        print(f"store probe: rank {rank} all-reduce {int(t.item())}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
