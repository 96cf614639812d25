"""Moving checkpoint files between nodes and tiers over the manager's gloo group.

- `replicate`: after a commit, every rank sends its own files to the same local rank on
  the K next nodes (ring order), and rank 0 sends DCP's `.metadata` to every node, so each
  node's local folder holds its own files, K peers' files and the metadata.
- `fill_missing`: at restore, the files a node lacks (its local folder lost, a hot spare
  that never had one) are broadcast from the lowest rank of a node that holds them.
- `drain`: each rank copies its own files from the local tier to the persistent one.

The byte transfers are plain `torch.distributed` send/recv/broadcast of uint8 tensors on a
gloo group of the same ranks as the job; a rank reads a file with `torch.from_file`.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist

from .layout import METADATA, copy_durable, fsync_dir


def _read(path: Path, size: int) -> torch.Tensor:
    if size == 0:
        return torch.empty(0, dtype=torch.uint8)
    return torch.from_file(str(path), shared=False, size=size, dtype=torch.uint8)


def _write(path: Path, data: torch.Tensor) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data.numpy().tobytes() if data.numel() else b"")
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


def replicate(
    pg: dist.ProcessGroup,
    folder: Path,
    rank: int,
    world: int,
    local_world: int,
    replicas: int,
    files_by_rank: dict[int, dict[str, dict[str, int]]],
) -> list[str]:
    """Send this rank's files to K peers and receive K peers' files into `folder`.

    Every rank of the job calls it with the same arguments except `rank`; returns the
    names received."""
    nodes = max(1, world // local_world)
    k = min(max(0, replicas), nodes - 1)
    received: list[str] = []
    mine = sorted(n for n in files_by_rank.get(rank, {}) if n != METADATA)
    for j in range(1, k + 1):
        dst = (rank + j * local_world) % world
        src = (rank - j * local_world) % world
        theirs = sorted(n for n in files_by_rank.get(src, {}) if n != METADATA)
        works = []
        for i, name in enumerate(mine):
            t = _read(folder / name, files_by_rank[rank][name]["size"])
            works.append(dist.isend(t, dst, group=pg, tag=j * 1000 + i))
        bufs = []
        for i, name in enumerate(theirs):
            buf = torch.empty(files_by_rank[src][name]["size"], dtype=torch.uint8)
            works.append(dist.irecv(buf, src, group=pg, tag=j * 1000 + i))
            bufs.append((name, buf))
        for w in works:
            if w is not None:
                w.wait()
        for name, buf in bufs:
            _write(folder / name, buf)
            received.append(name)
    # the metadata to every node (its local rank 0 keeps it)
    meta = files_by_rank.get(0, {}).get(METADATA)
    if meta is not None and nodes > 1:
        t = (
            _read(folder / METADATA, meta["size"])
            if rank == 0
            else torch.empty(meta["size"], dtype=torch.uint8)
        )
        dist.broadcast(t, 0, group=pg)
        if rank != 0 and rank % local_world == 0:
            _write(folder / METADATA, t)
    fsync_dir(folder)
    return received


def fill_missing(
    pg: dist.ProcessGroup,
    folder: Path,
    rank: int,
    local_world: int,
    files: dict[str, dict[str, int]],
    have: dict[int, list[str]],
) -> dict[str, int]:
    """Complete every node's `folder` from the others: `have` maps each node's first rank
    to the file names its folder holds. Returns {file: rank it came from} for the files
    this node received."""
    me = rank - rank % local_world
    got: dict[str, int] = {}
    for name in sorted(files):
        holders = sorted(r for r, names in have.items() if name in names)
        lacking = [r for r in have if name not in have[r]]
        if not lacking:
            continue
        if not holders:
            raise RuntimeError(f"no node holds checkpoint file {name}")
        src = holders[0]
        t = (
            _read(folder / name, files[name]["size"])
            if rank == src
            else torch.empty(files[name]["size"], dtype=torch.uint8)
        )
        dist.broadcast(t, src, group=pg)
        if rank == me and me in lacking:
            folder.mkdir(parents=True, exist_ok=True)
            _write(folder / name, t)
            got[name] = src
    if got:
        fsync_dir(folder)
    return got


def drain(local: Path, persistent_partial: Path, names: list[str]) -> int:
    """Copy `names` from the local folder to the persistent one (fsynced); bytes copied."""
    persistent_partial.mkdir(parents=True, exist_ok=True)
    total = 0
    for name in names:
        copy_durable(local / name, persistent_partial / name)
        total += (local / name).stat().st_size
    fsync_dir(persistent_partial)
    return total
