"""Benchmark of relaunch.checkpoint on CPU/gloo (one rank): a training loop with ~1 GB of state.

The state is a real model's (an MLP of 8192 x 8192 linear layers: 4 layers = 1 GiB of
float32 parameters, SGD) and the loop runs real steps (forward, backward,
`optimizer.step()`; `--batch` rows per step). Measured in paired rounds (each round runs
`dd`, `torch.save`, a synchronous DCP save, plain steps and two saves of the manager back
to back, so every ratio compares figures taken under the same load of a shared machine;
the median and range over the rounds are reported; docs/checkpointing.md):
- the time the training loop is blocked per save, as the loop sees it: (the save call +
  the step after it) - a plain step (the median of the round's plain steps), for
  `save_async` with the optimizer guarded (staging overlaps the step; the guard makes the
  step wait for the copy) and, for comparison, with synchronous staging (`save_async`,
  then `wait_staged()` at once: the manager without a guard); the guarded save's own
  record (`blocked_s`: the call + the guard's wait) too; vs `torch.save` of the same
  state (fsynced) and a synchronous `dcp.save` - ratio, target <= 10 %;
- the background write's throughput (bytes / time from the staging copy done to DCP's
  write finished, in the spawned writer process) vs `dd` (conv=fsync) to the same disk -
  ratio, target >= 50 %;
- restore time from the local tier vs the persistent one (`load_latest` / `load`).

    python bench/checkpoint_bench.py --dir /tmp/ckpt-bench --gib 1 [--rounds 5] [--batch 32]

The directory is removed at the end. Needs ~4x the state size free on the disk and ~4x
in memory (parameters, gradients, staging buffers, page cache).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import socket
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn

from relaunch.checkpoint import CheckpointManager, load


def _model(gib: float, width: int) -> nn.Sequential:
    """An MLP of `width` x `width` layers (ReLU between) holding about `gib` GiB of float32."""
    n = max(1, round(gib * (1 << 30) / (width * width * 4)))
    layers: list[nn.Module] = []
    for i in range(n):
        layers.append(nn.Linear(width, width))
        if i < n - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _state(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    return {"model": model.state_dict(), "optim": opt.state_dict()}


def _step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> float:
    """One training step (forward, backward, optimizer.step); returns its seconds."""
    t0 = time.perf_counter()
    loss = model(x).pow(2).mean()
    opt.zero_grad(set_to_none=False)
    loss.backward()
    opt.step()
    return time.perf_counter() - t0


def _fsync_tree(folder: Path) -> None:
    for p in folder.rglob("*"):
        if p.is_file():
            with open(p, "rb") as fh:
                os.fsync(fh.fileno())


def _dd(folder: Path, mib: int) -> float:
    """dd's own throughput figure (bytes/s) for writing `mib` MiB with a final fsync."""
    out = folder / "dd.bin"
    r = subprocess.run(
        ["dd", "if=/dev/zero", f"of={out}", "bs=8M", f"count={mib // 8}", "conv=fsync"],
        capture_output=True,
        text=True,
        check=True,
    )
    out.unlink()
    m = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", r.stderr)
    assert m, r.stderr
    return int(m.group(1)) / float(m.group(2))


def _torch_save(sd: dict[str, Any], base: Path) -> float:
    t0 = time.perf_counter()
    torch.save(sd, base / "plain.pt")
    with open(base / "plain.pt", "rb") as fh:
        os.fsync(fh.fileno())
    dt = time.perf_counter() - t0
    (base / "plain.pt").unlink()
    return dt


def _dcp_save(sd: dict[str, Any], base: Path) -> float:
    t0 = time.perf_counter()
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(str(base / "sync")))
    dt = time.perf_counter() - t0
    shutil.rmtree(base / "sync")
    return dt


def _spread(values: list[float], fmt: str) -> str:
    """median [min - max] of `values`, each formatted with `fmt`."""
    return (
        f"{format(statistics.median(values), fmt)} "
        f"[{format(min(values), fmt)} - {format(max(values), fmt)}]"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default="/tmp/relaunch-ckpt-bench")
    p.add_argument("--gib", type=float, default=1.0, help="model size (parameters), GiB")
    p.add_argument("--width", type=int, default=8192, help="features per layer")
    p.add_argument("--batch", type=int, default=32, help="rows per training step")
    p.add_argument("--plain-steps", type=int, default=4, help="plain steps per round")
    p.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="paired rounds (dd, torch.save, dcp.save, steps, two saves back to back)",
    )
    a = p.parse_args()
    for name in ("rounds", "batch", "width", "plain_steps"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    base = Path(a.dir)
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=10))
    try:
        torch.manual_seed(0)
        model = _model(a.gib, a.width)
        opt = torch.optim.SGD(model.parameters(), lr=1e-6)
        x = torch.randn(a.batch, a.width)
        sd = _state(model, opt)
        nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        print(
            f"state: {len(sd['model'])} tensors, {nbytes / 2**30:.2f} GiB "
            f"(MLP {a.width} wide, SGD), batch {a.batch}, torch threads "
            f"{torch.get_num_threads()}; {a.rounds} paired rounds; "
            f"load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        _step(model, opt, x)  # gradients allocated, kernels warm

        mgr = CheckpointManager(base / "persistent", local_dir=base / "local", report=False)
        first = mgr.save_async(_state(model, opt), 1)  # also spawns the writer process
        mgr.wait()
        guard = mgr.guard(opt)  # from here save_async returns once staging has started
        step_no = 1
        rows = []
        for r in range(a.rounds):
            # each round measures the baselines and the saves back to back, so a ratio
            # compares figures taken under the same load of this shared machine
            dd_bps = _dd(base, int(nbytes >> 20))
            t_torch = _torch_save(_state(model, opt), base)
            t_dcp = _dcp_save(_state(model, opt), base)
            plains = [_step(model, opt, x) for _ in range(a.plain_steps)]
            # synchronous staging (the manager without a guard): the call waits for the copy
            step_no += 1
            t0 = time.perf_counter()
            mgr.save_async(_state(model, opt), step_no)
            mgr.wait_staged()
            _step(model, opt, x)
            sync_loop = time.perf_counter() - t0
            srec = mgr.wait()
            assert srec is not None and srec.outcome == "committed"
            plains.append(_step(model, opt, x))  # a plain step after the write, too
            # staging overlapped with the step: the optimizer's guard waits for the copy
            step_no += 1
            t0 = time.perf_counter()
            call = mgr.save_async(_state(model, opt), step_no)
            _step(model, opt, x)
            async_loop = time.perf_counter() - t0
            rec = mgr.wait()
            assert rec is not None and rec.outcome == "committed"
            plains.append(_step(model, opt, x))
            plain = statistics.median(plains)
            sync_loop, async_loop = sync_loop - plain, async_loop - plain
            t_write = rec.written_at - rec.staged_at
            write_bps = nbytes / t_write
            rows.append(
                (dd_bps, t_torch, t_dcp, plain, sync_loop, async_loop, call, rec.blocked_s)
                + (t_write, write_bps, srec.blocked_s)
            )
            print(
                f"round {r + 1}: dd {dd_bps / 2**20:.0f} MiB/s  torch.save {t_torch:.3f} s  "
                f"dcp.save {t_dcp:.3f} s  step {plain:.3f} s [{min(plains):.3f}-"
                f"{max(plains):.3f}]  loop-blocked: sync staging {sync_loop:.3f} s, async "
                f"{async_loop:.3f} s ({async_loop / t_torch:.1%} / {async_loop / t_dcp:.1%})  "
                f"records: sync staging {srec.blocked_s:.3f} s, async {rec.blocked_s:.3f} s "
                f"(call {call:.3f} s)  "
                f"write {t_write:.3f} s {write_bps / 2**20:.0f} MiB/s "
                f"({write_bps / dd_bps:.0%} of dd)",
                flush=True,
            )
        guard.remove()

        # the newest checkpoint holds the state from before the last step: keep a slice
        snap = {k: v[:16].clone() for k, v in model.state_dict().items()}
        step_no += 1
        mgr.save_async(_state(model, opt), step_no)
        mgr.wait()
        target = {"model": {k: torch.empty_like(v) for k, v in model.state_dict().items()}}
        t_local, t_pers = [], []
        for _ in range(2):  # alternate, so neither tier alone profits from a warm page cache
            t0 = time.perf_counter()
            info = mgr.load_latest(target)
            t_local.append(time.perf_counter() - t0)
            assert info is not None and mgr.restored_tier == "local"
            assert all(torch.equal(target["model"][k][:16], snap[k]) for k in snap)
            t0 = time.perf_counter()
            load(target, base / "persistent" / info.path.name)
            t_pers.append(time.perf_counter() - t0)
        mgr.close()

        col = list(zip(*rows, strict=True))
        dd_v, torch_v, dcp_v, plain_v, sync_v, async_v, call_v, rec_v, write_v, wbps_v, srec_v = (
            list(c) for c in col
        )
        mib = [v / 2**20 for v in dd_v]
        print(
            f"median [min - max] over {a.rounds} rounds (load average now {os.getloadavg()[0]:.1f}):"
        )
        print(f"dd (bs=8M, conv=fsync)             {_spread(mib, '.0f')} MiB/s")
        print(f"torch.save + fsync (blocking)      {_spread(torch_v, '.3f')} s")
        print(f"dcp.save synchronous (blocking)    {_spread(dcp_v, '.3f')} s")
        print(f"training step (plain)              {_spread(plain_v, '.3f')} s")
        print(f"save_async first call (spawn)      {first:.3f} s")
        print(f"loop-blocked, synchronous staging  {_spread(sync_v, '.3f')} s (call + step - step)")
        print(
            f"loop-blocked, async staging (guard) {_spread(async_v, '.3f')} s (call + step - step)"
        )
        for label, vals in (("loop async", async_v), ("loop sync staging", sync_v)):
            r_torch = [b / t for b, t in zip(vals, torch_v, strict=True)]
            r_dcp = [b / t for b, t in zip(vals, dcp_v, strict=True)]
            n_ok = sum(v <= 0.10 for v in r_dcp)
            print(f"  {label + ' / torch.save':<33}{_spread(r_torch, '.1%')}")
            print(
                f"  {label + ' / dcp.save':<33}{_spread(r_dcp, '.1%')}  "
                f"({n_ok} of {a.rounds} <= 10 %; target <= 10 %)"
            )
        print(
            f"async staging, its record          {_spread(rec_v, '.3f')} s "
            f"(call + guard's wait; the call alone {_spread(call_v, '.3f')} s)"
        )
        print(f"sync staging, its record           {_spread(srec_v, '.3f')} s (the call: copy)")
        for label, vals in (("async record", rec_v), ("sync staging record", srec_v)):
            r_torch = [b / t for b, t in zip(vals, torch_v, strict=True)]
            r_dcp = [b / t for b, t in zip(vals, dcp_v, strict=True)]
            n_ok = sum(v <= 0.10 for v in r_dcp)
            print(f"  {label + ' / torch.save':<33}{_spread(r_torch, '.1%')}")
            print(
                f"  {label + ' / dcp.save':<33}{_spread(r_dcp, '.1%')}  "
                f"({n_ok} of {a.rounds} <= 10 %; target <= 10 %)"
            )
        print(
            f"background write (writer process)  {_spread(write_v, '.3f')} s, "
            f"{_spread([v / 2**20 for v in wbps_v], '.0f')} MiB/s"
        )
        r_dd = [w / d for w, d in zip(wbps_v, dd_v, strict=True)]
        print(f"  ratio vs dd                      {_spread(r_dd, '.0%')}  (target >= 50%)")
        print(f"restore local tier (load_latest)   {min(t_local):8.3f} s (checksums + load)")
        print(f"restore persistent tier (load)     {min(t_pers):8.3f} s (checksums + load)")
    finally:
        dist.destroy_process_group()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
