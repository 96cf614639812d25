"""What the checkpoint workers under `relaunch run` (ckpt_job.py, ckpt_replicas.py) share:
the start of a rank (its `--root`, gloo, rank, cycle, node and the node's local tier) and
the state it saves, whose values are a function of the step so a restore is checked by
content. Imported as `tests.workers.ckpt_common` (the launcher's tests put the repository on
the workers' PYTHONPATH)."""

from __future__ import annotations

import argparse
import os
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


def state(
    step: float, rank: int, *, w: tuple[int, int], r: tuple[int, int]
) -> dict[str, torch.Tensor]:
    # "w" is replicated (the same on every rank: DCP writes it once), "r<rank>" is per rank
    return {
        "w": torch.full(w, float(step)),
        f"r{rank}": torch.full(r, float(step) * 10 + rank),
    }
