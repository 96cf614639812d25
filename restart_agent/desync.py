"""The signature of an all-rank collective timeout: every rank timed out in one collective.

When every rank of the job reports the collective library's watchdog timeout at the same
collective sequence number (`WorkNCCL(SeqNum=N, OpType=OP, ...)`) and no rank is silent,
no peer failed first: the ranks disagree about the collectives they run (a mismatched or
missing collective, a rank that skipped one). Identical on consecutive cycles that never
progressed, that is a workload loop (docs/restart_agent.md), unless a node or link fault was
seen. `all_rank_timeout(evidence)` gives the signature, e.g. `ALLREDUCE@5/8` (op, sequence
number, ranks), or None.

Which classes count, and which cascades say a link or a peer failed instead, is data in
taxonomy.yaml (`desync`).
"""

from __future__ import annotations

import re

from relaunch.restart_agent.model import CycleEvidence
from relaunch.restart_agent.taxonomy import taxonomy

_SEQ = re.compile(r"SeqNum=(\d{1,12})(?:, OpType=(\w{1,40}))?")


def all_rank_timeout(evidence: CycleEvidence) -> str | None:
    """`OP@SEQ/RANKS` when every rank seen timed out at one sequence number, else None."""
    tax = taxonomy()
    if not tax.desync_timeouts:
        return None
    if any(e.line >= 0 for e in evidence.roots):
        return None  # a root error explains the timeouts
    if any(g.failure_class in tax.desync_faults for g in evidence.cascades):
        return None  # a link or a peer failed: not a desync
    seen: dict[int, tuple[str, str]] = {}
    for e in evidence.cascade_evidence:
        if e.failure_class not in tax.desync_timeouts or e.rank is None:
            continue
        m = _SEQ.search(e.text)
        if m is None:
            continue  # no sequence number: the rank is not counted (so no signature)
        seen.setdefault(e.rank, (m.group(2) or "", m.group(1)))
    if len(seen) < 2 or len(set(seen.values())) != 1:
        return None
    ranks = set(seen)
    world = set(evidence.ranks_seen) | set(evidence.failed_ranks)
    facts = evidence.launcher
    if facts is not None and facts.world_size and len(ranks) != facts.world_size:
        return None
    if not world <= ranks:
        return None  # a rank that did not time out: the silent rank is the suspect
    if facts is not None and any(not h.get("healthy", True) for h in facts.node_health):
        return None
    op, seq = next(iter(seen.values()))
    return f"{op or 'collective'}@{seq}/{len(ranks)}"
