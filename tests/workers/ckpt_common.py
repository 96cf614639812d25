"""What the checkpoint workers share: the start of a rank under `relaunch run` (ckpt_job.py,
ckpt_replicas.py: its `--root`, gloo, rank, cycle, node and the node's local tier), the start
of a lone rank outside a launcher (ckpt_fsspec.py, ckpt_staging.py: world 1 on a free
loopback port) and the state it saves, whose values are a function of the step so a restore is checked by
content. Imported as `tests.workers.ckpt_common` (the launcher's tests put the repository on
the workers' PYTHONPATH)."""

from __future__ import annotations

import argparse
import datetime
import os
import socket
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Rank:
    root: Path
    rank: int
    cycle: int
    node: int
    local: Path  # this node's local checkpoint tier


def start() -> Rank:
    """Parse `--root`, join the gloo group and say who this rank is."""
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    root = Path(p.parse_args().root)
    dist.init_process_group("gloo")
    node = int(os.environ["GROUP_RANK"])
    cycle = int(os.environ.get("RELAUNCH_CYCLE", "0"))
    return Rank(root, dist.get_rank(), cycle, node, root / f"node{node}")


def start_alone() -> None:
    """Join a gloo group of one (rank 0, world 1) on a free loopback port: a lone rank that
    DCP's async save and its spawned writer need, without a launcher."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=5))


def state(
    step: float, rank: int, *, w: tuple[int, int], r: tuple[int, int]
) -> dict[str, torch.Tensor]:
    # "w" is replicated (the same on every rank: DCP writes it once), "r<rank>" is per rank
    return {
        "w": torch.full(w, float(step)),
        f"r{rank}": torch.full(r, float(step) * 10 + rank),
    }
