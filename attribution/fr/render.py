"""Render a Flight Recorder analysis result as a short human-readable report.

Text that comes from dumps (group descriptions, file names, errors) is printed through
`attribution.core.terminal.safe_text`: no escape sequence from a dump reaches the terminal.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from relaunch.attribution.core.terminal import safe_text


def ranks_str(ranks: Iterable[int]) -> str:
    """Compress ranks into ranges: [0, 1, 2, 5] -> '0-2,5'."""
    rs = sorted(set(ranks))
    if not rs:
        return "-"
    out: list[str] = []
    start = prev = rs[0]
    for r in [*rs[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ",".join(out)


def _op(op: dict[str, Any]) -> str:
    sizes = op.get("sizes") or []
    text = f"{op.get('type')} seq {op.get('seq_id')}"
    if sizes:
        text += f" sizes {sizes}"
    if op.get("dtype"):
        text += f" {op['dtype']}"
    if op.get("coalesced"):
        text += f" (coalesced: {len(op['coalesced'])} ops)"
    return text


def render_text(result: dict[str, Any]) -> str:
    """The report printed by `relaunch fr --format text` (terminal controls escaped)."""
    lines = [
        f"Flight Recorder: {result['ranks_read']} of {result['world_size']} ranks read"
        + (f" (dump version {', '.join(result['versions'])})" if result.get("versions") else ""),
        f"culprit ranks: {ranks_str(result['culprit_ranks'])}",
        f"summary: {result['summary']}",
    ]
    for c in result.get("culprits", []):
        hows = sorted({g["how"] for g in c["groups"]})
        lines.append(
            f"  rank {c['rank']}: {', '.join(hows) or 'lagging'} in {len(c['groups'])} group(s),"
            f" waited on by {c['waited_on_by']} rank(s)"
            + (" [no dump]" if c["dump"] == "missing" else "")
        )
    for g in result.get("groups", []):
        lines.append(
            f"group {g['id']} {g.get('description') or ''} ({len(g['ranks'])} ranks) {g['state']}:"
            f" {_op(g['stalled_op'])}"
        )
        lines.append(
            f"  waiting {ranks_str(g['waiting_ranks'])}; lagging {ranks_str(g['lagging_ranks'])}"
            f" (culprits {ranks_str(g['culprit_ranks'])},"
            f" blocked elsewhere {ranks_str(g['blocked_elsewhere'])})"
        )
        if g.get("mismatch"):
            lines.append(f"  op mismatch across ranks: {g['mismatch']}")
    if result.get("missing_ranks"):
        lines.append(f"missing dumps: ranks {ranks_str(result['missing_ranks'])}")
    for u in result.get("unreadable", []):
        lines.append(f"unreadable: {u['path']}: {u['error']}")
    return safe_text("\n".join(lines))
