"""A worker of a multi-node job that proves its store works, then waits for the test.

Every rank joins the gloo process group through MASTER_ADDR:MASTER_PORT (the workers'
store the launcher of group rank 0 hosts) and all-reduces a one; global rank 0 writes
`MASTER_ADDR MASTER_PORT SUM` to `$STORE_OUT/master` (atomically). Then every rank waits
for `$STORE_OUT/go` (bounded at 300 s), meets the others at a barrier and exits 0.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

out = Path(os.environ["STORE_OUT"])
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
if dist.get_rank() == 0:
    tmp = out / "master.tmp"
    tmp.write_text(f"{os.environ['MASTER_ADDR']} {os.environ['MASTER_PORT']} {int(t.item())}")
    os.replace(tmp, out / "master")
deadline = time.monotonic() + 300
while not (out / "go").exists() and time.monotonic() < deadline:
    time.sleep(0.1)
dist.barrier()
dist.destroy_process_group()
print(f"rank {os.environ['RANK']} done", flush=True)
