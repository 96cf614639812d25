"""Benchmark of relaunch.checkpoint on CPU/gloo (one rank) with ~1 GB of state.

Measures, in paired rounds (each round runs `dd`, `torch.save`, a synchronous DCP save and
`save_async` back to back, so every ratio compares figures taken under the same load of a
shared machine; the median and range over the rounds are reported; docs/checkpointing.md):
- the time the training loop is blocked per save: `save_async` (staging into reused
  shared-memory buffers) vs `torch.save` of the same state (fsynced) and a synchronous DCP
  `dcp.save` — ratio, target <= 10 %;
- the background write's throughput (bytes / time from `save_async` returning to DCP's
  write finished, in the spawned writer process) vs `dd` (1 GiB, conv=fsync) to the same
  disk — ratio, target >= 50 %;
- restore time from the local tier vs the persistent one (`load_latest` / `load`).

    python bench/checkpoint_bench.py --dir /tmp/ckpt-bench --gib 1 [--rounds 5]

The directory is removed at the end. Needs ~4x the state size free on the disk.
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


def _torch_save(sd: dict[str, torch.Tensor], base: Path) -> float:
    t0 = time.perf_counter()
    torch.save(sd, base / "plain.pt")
    with open(base / "plain.pt", "rb") as fh:
        os.fsync(fh.fileno())
    dt = time.perf_counter() - t0
    (base / "plain.pt").unlink()
    return dt


def _dcp_save(sd: dict[str, torch.Tensor], base: Path) -> float:
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
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="paired rounds (dd, torch.save, dcp.save, save_async back to back); default 5",
    )
    a = p.parse_args()
    if a.rounds < 1:
        p.error("--rounds must be at least 1")
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
        print(f"state: {len(sd)} tensors, {nbytes / 2**30:.2f} GiB; {a.rounds} paired rounds")

        mgr = CheckpointManager(base / "persistent", local_dir=base / "local", report=False)
        first = mgr.save_async(sd, 1)  # the first save also spawns the writer process
        mgr.wait()
        rows = []
        for r in range(a.rounds):
            # each round measures the baselines and save_async back to back, so a ratio
            # compares figures taken under the same load of this shared machine
            dd_bps = _dd(base, int(nbytes >> 20))
            t_torch = _torch_save(sd, base)
            t_dcp = _dcp_save(sd, base)
            for t in sd.values():
                t.add_(1.0)  # a "training step" between saves
            blocked = mgr.save_async(sd, 2 + r)
            rec = mgr.wait()
            assert rec is not None and rec.outcome == "committed"
            t_write = rec.written_at - (rec.started + rec.blocked_s)
            write_bps = nbytes / t_write
            rows.append((dd_bps, t_torch, t_dcp, blocked, t_write, write_bps))
            print(
                f"round {r + 1}: dd {dd_bps / 2**20:.0f} MiB/s  torch.save {t_torch:.3f} s  "
                f"dcp.save {t_dcp:.3f} s  blocked {blocked:.3f} s "
                f"({blocked / t_torch:.1%} / {blocked / t_dcp:.1%})  "
                f"write {t_write:.3f} s {write_bps / 2**20:.0f} MiB/s "
                f"({write_bps / dd_bps:.0%} of dd)",
                flush=True,
            )

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

        col = list(zip(*rows, strict=True))
        dd_v, torch_v, dcp_v, block_v, write_v, wbps_v = (list(c) for c in col)
        mib = [v / 2**20 for v in dd_v]
        print(f"median [min - max] over {a.rounds} rounds:")
        print(f"dd (bs=8M, conv=fsync)             {_spread(mib, '.0f')} MiB/s")
        print(f"torch.save + fsync (blocking)      {_spread(torch_v, '.3f')} s")
        print(f"dcp.save synchronous (blocking)    {_spread(dcp_v, '.3f')} s")
        print(f"save_async first call (spawn)      {first:.3f} s")
        print(f"save_async blocked per save        {_spread(block_v, '.3f')} s")
        r_torch = [b / t for b, t in zip(block_v, torch_v, strict=True)]
        r_dcp = [b / t for b, t in zip(block_v, dcp_v, strict=True)]
        print(f"  ratio vs torch.save              {_spread(r_torch, '.1%')}  (target <= 10%)")
        print(f"  ratio vs synchronous dcp.save    {_spread(r_dcp, '.1%')}  (target <= 10%)")
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
