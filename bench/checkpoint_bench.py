"""Benchmark of relaunch.checkpoint on CPU/gloo (one rank) with ~1 GB of state.

Measures, in one run and against baselines in the same run (docs/checkpointing.md):
- the time the training loop is blocked per save: `save_async` (staging into reused
  shared-memory buffers) vs `torch.save` of the same state (fsynced) and a synchronous DCP
  `dcp.save` — ratio, target <= 10 %;
- the background write's throughput (bytes / time from `save_async` returning to DCP's
  write finished, in the spawned writer process) vs `dd` (1 GiB, conv=fsync) to the same
  disk — ratio, target >= 50 %;
- restore time from the local tier vs the persistent one (`load_latest` / `load`).

    python bench/checkpoint_bench.py --dir /tmp/ckpt-bench --gib 1

The directory is removed at the end. Needs ~4x the state size free on the disk.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from relaunch.checkpoint import CheckpointManager, load


def _state(gib: float) -> dict[str, torch.Tensor]:
    per = 64 << 20  # 64 MiB tensors
    n = max(1, int(gib * (1 << 30)) // per)
    return {f"layer{i}.weight": torch.randn(per // 4) for i in range(n)}


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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default="/tmp/relaunch-ckpt-bench")
    p.add_argument("--gib", type=float, default=1.0)
    a = p.parse_args()
    base = Path(a.dir)
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=10))
    try:
        sd = _state(a.gib)
        nbytes = sum(t.numel() * t.element_size() for t in sd.values())
        print(f"state: {len(sd)} tensors, {nbytes / 2**30:.2f} GiB")
        dd_bps = _dd(base, int(nbytes >> 20))

        t0 = time.perf_counter()
        torch.save(sd, base / "plain.pt")
        with open(base / "plain.pt", "rb") as fh:
            os.fsync(fh.fileno())
        t_torch = time.perf_counter() - t0
        (base / "plain.pt").unlink()

        t0 = time.perf_counter()
        dcp.save(sd, storage_writer=dcp.FileSystemWriter(str(base / "sync")))
        t_dcp = time.perf_counter() - t0
        shutil.rmtree(base / "sync")

        mgr = CheckpointManager(base / "persistent", local_dir=base / "local", report=False)
        first = mgr.save_async(sd, 1)  # the first save also spawns the writer process
        mgr.wait()
        blocked, writes = [], []
        for step in (2, 3):
            for t in sd.values():
                t.add_(1.0)  # a "training step" between saves
            blocked.append(mgr.save_async(sd, step))
            rec = mgr.wait()
            assert rec is not None and rec.outcome == "committed"
            writes.append(rec.written_at - (rec.started + rec.blocked_s))
        t_block = min(blocked)
        t_write = min(writes)
        write_bps = nbytes / t_write

        target = {k: torch.empty_like(v) for k, v in sd.items()}
        t_local, t_pers = [], []
        for _ in range(2):  # alternate, so neither tier alone profits from a warm page cache
            t0 = time.perf_counter()
            info = mgr.load_latest(target)
            t_local.append(time.perf_counter() - t0)
            assert info is not None and mgr.restored_tier == "local"
            assert all(torch.equal(target[k], sd[k]) for k in sd)
            t0 = time.perf_counter()
            load(target, base / "persistent" / info.path.name)
            t_pers.append(time.perf_counter() - t0)
        mgr.close()

        print(f"dd (bs=8M, conv=fsync)            {dd_bps / 2**20:8.0f} MiB/s")
        print(f"torch.save + fsync (blocking)      {t_torch:8.3f} s")
        print(f"dcp.save synchronous (blocking)    {t_dcp:8.3f} s")
        print(f"save_async first call (spawn)      {first:8.3f} s")
        print(f"save_async blocked per save        {t_block:8.3f} s")
        print(f"  ratio vs torch.save              {t_block / t_torch:8.1%}  (target <= 10%)")
        print(f"  ratio vs synchronous dcp.save    {t_block / t_dcp:8.1%}  (target <= 10%)")
        print(
            f"background write (writer process)  {t_write:8.3f} s  {write_bps / 2**20:6.0f} MiB/s"
        )
        print(f"  ratio vs dd                      {write_bps / dd_bps:8.1%}  (target >= 50%)")
        print(f"restore local tier (load_latest)   {min(t_local):8.3f} s (checksums + load)")
        print(f"restore persistent tier (load)     {min(t_pers):8.3f} s (checksums + load)")
    finally:
        dist.destroy_process_group()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
