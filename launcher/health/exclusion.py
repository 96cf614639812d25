"""What a launcher records when its node fails the health check before a rendezvous.

Owns: which cycle the report belongs to (the cycle that just ended, whose verdict records
that the node is left out of the next; none when the node fails before it ever joined),
the record itself (`HealthReport.to_dict()` plus the node's place in the job, the shape
`restart_agent.NodeHealthNote.from_dict` reads), and the JSON copy written next to the
cycle logs (`<job dir>/node_health/<node>.cycle_<K>.json`, K the cycle it is left out of;
`<node>.first.json` before the first cycle).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from relaunch.attribution.core.files import safe_name, write_json_atomic
from relaunch.launcher.health.report import HealthReport

MAX_REASON = 2000  # the service accepts up to 4,000 characters


def exclusion_record(
    report: HealthReport, *, last_cycle: int, node_index: int | None
) -> tuple[int | None, dict[str, Any]]:
    """(cycle whose verdict records it, record) for a node that did not join the next cycle.

    `last_cycle` is the last cycle this launcher ran (-1: none yet); `node_index` its node
    number in that cycle (None on a single-node job or before any cycle). A node that
    fails before its first cycle gets cycle None: its launcher does not know the job's
    cycle numbers (a replacement node may join mid-job), so there is no verdict to join and
    only the JSON copy is written."""
    host = report.node or socket.gethostname()
    ran = last_cycle >= 0
    record = report.to_dict()
    record.update(
        node=f"node{node_index}" if node_index is not None else host,
        host=host,
        reason=str(record.get("reason") or "")[:MAX_REASON],
        ran_this_cycle=ran,
        excluded_from_cycle=last_cycle + 1 if ran else None,
    )
    return (last_cycle if ran else None), record


def write_record(job_dir: str | os.PathLike[str], record: dict[str, Any]) -> Path:
    """Write the record atomically as JSON under `<job_dir>/node_health/`; returns the path."""
    safe = safe_name(str(record["node"]))
    when = record.get("excluded_from_cycle")
    name = f"{safe}.cycle_{when}.json" if when is not None else f"{safe}.first.json"
    return write_json_atomic(Path(job_dir) / "node_health" / name, record)
