"""Worker of tests/checkpoint/test_checkpoint.py under `relaunch run` (2 nodes x 1 rank, gloo).

Cycle 0: save step 1 and wait for it (committed locally, replicated, drained); rank 1
removes its node's local checkpoint folder (the node is "replaced"); save step 2 and
rank 1 dies by SIGKILL while step 2 is in flight. Cycle 1: restore (step 1: the node
without local files gets them from its peer's replica), then save step 3 to completion,
then abort a save of step 4, then kill
rank 0's writer process during a save of step 5. Every finalization is appended to `finalized.txt`.
Values are a function of the step, so a restore is checked by content.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys

import torch
import torch.distributed as dist
from torch.distributed.checkpoint import _async_process_executor as ape

from relaunch.checkpoint import CheckpointError, CheckpointManager, latest_complete
from relaunch.client import report_progress
from tests.workers import ckpt_common


def state(step: float, rank: int) -> dict[str, torch.Tensor]:
    return ckpt_common.state(step, rank, w=(64, 1024), r=(16, 1024))


def main() -> int:
    me = ckpt_common.start()
    root, rank, cycle, local = me.root, me.rank, me.cycle, me.local
    fin = root / "finalized.txt"

    def on_finalize(info: object) -> None:
        with open(fin, "a") as fh:
            fh.write(f"rank={rank} step={info.step}\n")  # type: ignore[attr-defined]

    mgr = CheckpointManager(
        root / "persistent", local_dir=local, replicas=1, on_finalize=on_finalize
    )
    print(f"rank {rank} resume hint: {mgr.resume_hint()}", flush=True)
    sd = state(-1, rank)
    info = mgr.load_latest(sd)
    if info is None:
        print(f"rank {rank}: no checkpoint", flush=True)
    else:
        ok = torch.equal(sd["w"], state(info.step, rank)["w"]) and torch.equal(
            sd[f"r{rank}"], state(info.step, rank)[f"r{rank}"]
        )
        got = ",".join(f"{n}<-{src}" for n, src in sorted(mgr.restored_from.items()))
        print(
            f"rank {rank}: restored step {info.step} from {mgr.restored_tier} tier "
            f"content_ok={ok} from_peers=[{got}]",
            flush=True,
        )
    if cycle == 0:
        sd = state(1, rank)
        mgr.save_async(sd, 1)
        sd["w"].fill_(99.0)  # changing the live tensors cannot change the checkpoint
        mgr.wait()
        report_progress(iteration=1)
        dist.barrier()
        if rank == 1:
            shutil.rmtree(local)  # this node's local tier is gone
        dist.barrier()
        mgr.save_async(state(2, rank), 2)
        if rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)  # dies with step 2 in flight
        mgr.wait()  # never returns: rank 1's part of step 2 never arrives
        return 1
    # no iteration reports in this cycle: the complete checkpoint of step 3 is the progress
    mgr.save_async(state(3, rank), 3)
    rec = mgr.wait()
    print(f"rank {rank}: step 3 outcome={rec.outcome if rec else None}", flush=True)
    # rank 0 aborts step 4 before rank 1 has even started it: rank 1's part can never be
    # done before the abort, so the outcome does not depend on how fast the write is
    aborted = False
    if rank == 0:
        mgr.save_async(state(4, rank), 4)
        aborted = mgr.abort()
    dist.barrier()
    if rank != 0:
        mgr.save_async(state(4, rank), 4)
    rec = mgr.wait()
    print(f"rank {rank}: abort={aborted} outcome={rec.outcome if rec else None}", flush=True)
    # rank 0's writer process is killed by SIGKILL while step 5 is in flight (before rank 1
    # even starts it): the save fails on both ranks, step 5 never becomes visible
    if rank == 0:
        mgr.save_async(state(5, rank), 5)
        writer = ape._CHECKPOINT_PROCESS
        assert writer is not None
        os.kill(writer._save_process.pid, signal.SIGKILL)
    dist.barrier()
    if rank != 0:
        mgr.save_async(state(5, rank), 5)
    try:
        mgr.wait()
        outcome = "committed"
    except CheckpointError as exc:
        outcome = "failed"
        print(f"rank {rank}: step 5 error: {exc}", flush=True)
    print(f"rank {rank}: writer killed: step 5 {outcome}", flush=True)
    newest = latest_complete(root / "persistent")
    print(f"rank {rank}: newest persistent {newest.step if newest else None}", flush=True)
    mgr.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
