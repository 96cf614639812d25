"""Where a job's cycles continue, and the job-wide cycle number and restart budget.

- `next_cycle_in(job_dir)`: one more than the highest `cycle_<N>[.node<K>].log` already
  in the job's log folder (0 for a new job): a re-run of the same `--job-id` continues
  after them instead of overwriting `cycle_0.log`.
- `agree(store, rank, world, proposal)`: after each rendezvous, every node proposes the
  cycle number it would start and the restarts it has seen spent; all nodes adopt the
  maximum of each, exchanged through the rendezvous store (the c10d store elastic already
  has). So in a multi-node job the nodes agree on what cycle N is, and the
  `--max-restarts` budget is job-wide (as NVRx's job-level restarts): a node that was
  restarted because another node failed counts that failure too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

_CYCLE_LOG = re.compile(r"^cycle_(\d+)(?:\.node\d+)?\.log$")
AGREE_TIMEOUT_S = 300.0  # the other nodes left the same rendezvous round just now
_KEY = "relaunch/agree"


@dataclass(frozen=True)
class Proposal:
    next_cycle: int
    restarts_used: int


def next_cycle_in(job_dir: str | Path) -> int:
    """One more than the highest cycle log number in `job_dir`, or 0."""
    top = -1
    try:
        names = [p.name for p in Path(job_dir).iterdir()]
    except OSError:
        return 0
    for name in names:
        m = _CYCLE_LOG.match(name)
        if m:
            top = max(top, int(m.group(1)))
    return top + 1


def agree(store: Any, rank: int, world: int, mine: Proposal, *, tag: str = "") -> Proposal:
    """Exchange proposals through `store` (keys `relaunch/agree[/tag]/<rank>`); the max wins.

    The c10d rendezvous gives each round its own key prefix, so keys of an earlier round
    are never read; a store shared by all rounds (static rendezvous) needs a `tag` that
    every node derives the same way for the round.
    """
    if world <= 1:
        return mine
    base = f"{_KEY}/{tag}" if tag else _KEY
    store.set(f"{base}/{rank}", json.dumps([mine.next_cycle, mine.restarts_used]))
    keys = [f"{base}/{r}" for r in range(world)]
    store.wait(keys, timedelta(seconds=AGREE_TIMEOUT_S))
    values = [json.loads(store.get(k)) for k in keys]
    return Proposal(
        next_cycle=max(int(v[0]) for v in values),
        restarts_used=max(int(v[1]) for v in values),
    )
