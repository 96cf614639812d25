"""The demo training job: 2 ranks, gloo on CPU, a tiny model, checkpoints, injected faults.

Run by `relaunch demo` under `relaunch run`. The story it tells, one cycle at a time:

- cycle 0: training runs, checkpoints asynchronously (relaunch.checkpoint: the staging copy
  overlaps the next step, guarded by the optimizer's step pre-hook; the write runs in a
  background process; a checkpoint is visible once every rank's part is durable),
  then rank 1 hits an infrastructure-like fault (a realistic NCCL network error line,
  then the process dies by SIGKILL) -> RESTART;
- cycle 1: resumes from the newest complete checkpoint (found by `load_latest`; the
  launcher names it in RELAUNCH_RESUME_CHECKPOINT), makes progress, then rank 0 meets a
  corrupt data sample (a workload bug: it is in the data, it will be there every time);
- cycle 2: resumes, reaches the same sample, fails identically without progress -> STOP.

Arguments: `--workdir DIR` (checkpoints under DIR/checkpoints), `--iterations N`, `--ckpt-every K`,
`--fault-at I` (iteration of the infrastructure fault in the first cycle) and
`--bad-sample-at I` (iteration whose data sample is corrupt).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from relaunch.checkpoint import CheckpointManager
from relaunch.client import heartbeat, report_progress, section


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", required=True)
    p.add_argument("--iterations", type=int, default=40)
    p.add_argument("--ckpt-every", type=int, default=5)
    p.add_argument("--fault-at", type=int, default=12)
    p.add_argument("--bad-sample-at", type=int, default=23)
    return p.parse_args()


def _batch(iteration: int, rank: int, bad_at: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(iteration * 100 + rank)
    x = torch.randn(8, 16, generator=g)
    y = x.sum(dim=1, keepdim=True)
    if iteration == bad_at and rank == 0:
        x = torch.randn(8, 17, generator=g)  # the corrupt sample: one feature too many
        shard = "/data/train/shard-00003.bin"
        raise ValueError(
            f"corrupt sample in {shard}: expected 16 features per row, got {x.shape[1]}"
        )
    return x, y


def main() -> int:
    a = _args()
    ckpt_dir = Path(a.workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    cycle = int(os.environ.get("RELAUNCH_CYCLE", os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")))
    heartbeat()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    mgr = CheckpointManager(ckpt_dir)
    # save_async returns once staging has started; the optimizer's next step waits for the
    # copy (the only thing here that changes the saved state), so it overlaps the step
    mgr.guard(opt)
    hint = mgr.resume_hint()
    resumed_at = torch.tensor(0)
    info = mgr.load_latest({"model": model.state_dict(), "iteration": resumed_at})  # in place
    start = int(resumed_at)
    if info is not None and rank == 0:
        print(
            f"resumed from checkpoint step {info.step} ({info.path}, the newest complete; "
            f"the launcher said {hint})",
            flush=True,
        )
    elif rank == 0:
        print("no checkpoint: starting from scratch", flush=True)

    for it in range(start + 1, a.iterations + 1):
        if it == a.bad_sample_at and rank == 0:
            # the story: the checkpoints started before the bad sample are complete, so the
            # next cycle resumes from the newest and the repeat shows no progress (without
            # this, whether an in-flight save landed before the error decided the verdict)
            mgr.wait()
        last = mgr.last
        staged = last if last is not None and last.step == it - 1 else None
        with section("step"):
            x, y = _batch(it, rank, a.bad_sample_at)
            loss = nn.functional.mse_loss(ddp(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        heartbeat()
        if staged is not None and rank == 0:  # this step's optimizer waited for its staging
            print(
                f"checkpoint step {staged.step}: training blocked {staged.blocked_s:.3f} s "
                "(save_async, then the optimizer's wait for the staging copy)",
                flush=True,
            )
        if it % a.ckpt_every == 0:  # returns once staging started; written in the background
            sd = {"model": model.state_dict(), "iteration": torch.tensor(it)}
            call = mgr.save_async(sd, it)
            if rank == 0:
                print(f"checkpoint step {it} started (save_async {call:.3f} s)", flush=True)
        if rank == 0:
            print(f"iteration {it} loss {loss.item():.4f}", flush=True)
        report_progress(iteration=it)
        if cycle == 0 and it == a.fault_at and rank == 1:
            mgr.wait()  # the story: the checkpoint started before the fault is complete
            host = os.uname().nodename
            print(
                f"{host}:{os.getpid()}:{os.getpid() + 7} [1] NCCL WARN NET/IB : Got completion "
                "from peer 10.0.0.3<40527> with error 12, opcode 0, len 0, vendor err 129",
                flush=True,
            )
            time.sleep(0.3)  # the NCCL line lands in the log before the peers' cascade errors
            os.kill(os.getpid(), signal.SIGKILL)
    mgr.wait()
    mgr.close()
    if rank == 0:
        print(f"training finished: {a.iterations} iterations on {world} ranks", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
