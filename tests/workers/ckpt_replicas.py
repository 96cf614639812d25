"""Worker of tests/checkpoint/test_checkpoint_replicas.py under `relaunch run` (3 nodes x 1 rank, gloo).

`replicas=2`, no drain (the persistent tier stays empty, so a restore can only come from
the local tiers). Cycle 0: save step 1 and wait for it; nodes 1 and 2 remove their local
tier; every rank exits 1 (the launchers restart the job). Cycle 1: restore: node 0 alone
holds every rank's shard (its own and its two peers' replicas), and nodes 1 and 2 get
theirs from it. With one replica node 1's shard would have been only on node 2.
"""

from __future__ import annotations

import shutil
import sys

import torch
import torch.distributed as dist

from relaunch.checkpoint import CheckpointManager
from tests.workers import ckpt_common


def state(step: float, rank: int) -> dict[str, torch.Tensor]:
    return ckpt_common.state(step, rank, w=(64, 256), r=(32, 256))


def main() -> int:
    me = ckpt_common.start()
    root, rank, cycle, node, local = me.root, me.rank, me.cycle, me.node, me.local
    mgr = CheckpointManager(root / "persistent", local_dir=local, replicas=2, drain=False)
    sd = state(-1, rank)
    info = mgr.load_latest(sd)
    if info is not None:
        ok = all(torch.equal(sd[k], v) for k, v in state(info.step, rank).items())
        got = ",".join(f"{n}<-{src}" for n, src in sorted(mgr.restored_from.items()))
        print(
            f"node {node} rank {rank}: restored step {info.step} from {mgr.restored_tier} "
            f"tier content_ok={ok} from_peers=[{got}]",
            flush=True,
        )
    else:
        print(f"node {node} rank {rank}: no checkpoint", flush=True)
    if cycle == 0:
        mgr.save_async(state(1, rank), 1)
        rec = mgr.wait()
        print(f"node {node} rank {rank}: step 1 {rec.outcome if rec else None}", flush=True)
        dist.barrier()
        if node in (1, 2):
            shutil.rmtree(local)  # these nodes' local tiers are gone
        dist.barrier()
        mgr.close()
        dist.destroy_process_group()
        return 1
    mgr.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
