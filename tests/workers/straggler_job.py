"""A gloo job for the straggler tests: every rank times a section `fwd` each step.

Each step: `with straggler.section("fwd"): sleep(base)` (rank --slow-rank sleeps
--slowdown times longer), then an all_reduce outside the section, as a data-parallel step
would. The job runs until every rank has sent --reports straggler reports (agreed with an
all_reduce of the counts), so the tests count reports, not seconds. With --hang-after K
the slow rank, once it has sent K reports, stays in its section (a straggler that becomes
a hang): the launcher's heartbeat timeout ends the cycle.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist

from relaunch.launcher.client import heartbeat, straggler


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--reports", type=int, default=4)
    p.add_argument("--base", type=float, default=0.05, help="seconds in fwd per step")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slowdown", type=float, default=5.0)
    p.add_argument("--hang-after", type=int, default=-1, help="reports before the slow rank hangs")
    a = p.parse_args()
    heartbeat()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    pause = a.base * (a.slowdown if rank == a.slow_rank else 1.0)
    t = torch.zeros(1)
    while True:
        hang = rank == a.slow_rank and 0 <= a.hang_after <= straggler.reports_sent
        with straggler.section("fwd"):
            time.sleep(3600 if hang else pause)
        heartbeat()
        t[0] = straggler.reports_sent
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        if t[0].item() >= a.reports:
            break
    print(f"rank {rank} sent {straggler.reports_sent} straggler reports", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
