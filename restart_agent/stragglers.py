"""Stragglers in the verdict: the launcher's scores as evidence, a slow rank as the suspect.

The launcher names a rank whose relative score stayed below its threshold in consecutive
reports (`straggler` facts, docs/straggler.md). When a cycle then ends in a timeout (a
primary of a class in `taxonomy.yaml`'s `straggler_suspects`: NCCL watchdog, gloo or
store timeouts, a declared hang) or with cascades only, and a persistent straggler (at least
`MIN_REPORTS` reports below the threshold) was named before that line, the straggler is the
suspect: the primary evidence keeps its line and class and takes the straggler's rank (and
node) with `rank_source: "straggler"`. The decision is never changed here: only who is
blamed, and `verdict.stragglers` carries the scores.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from relaunch.restart_agent.model import Evidence, LauncherFacts, StragglerReport
from relaunch.restart_agent.taxonomy import taxonomy

MIN_REPORTS = 2


def persistent(facts: LauncherFacts | None, before_line: int | None = None) -> list[dict[str, Any]]:
    """Stragglers named in >= MIN_REPORTS reports (first named before `before_line`), slowest first."""
    if facts is None:
        return []
    out = [
        s
        for s in facts.stragglers
        if s["reports"] >= MIN_REPORTS and (before_line is None or s["since_line"] < before_line)
    ]
    return sorted(out, key=lambda s: (s["relative"], s["since_line"], s["rank"]))


def suspect(
    primary: Evidence | None,
    facts: LauncherFacts | None,
    cascade_classes: frozenset[str] | set[str] = frozenset(),
) -> Evidence | None:
    """The primary evidence re-blamed on a persistent straggler, or None when the rule does
    not apply (no timeout primary, no straggler named before it).

    A timeout primary is a cascade, a class of `straggler_suspects`, or a process exit the
    launcher saw (`launcher.exit`: no error of its own in the log) in a cycle whose
    cascades (`cascade_classes`) include such a timeout: the rank timed out and exited."""
    if primary is None or facts is None or not facts.stragglers:
        return None
    suspects = taxonomy().straggler_suspects
    timed_out_exit = primary.pattern_id == "launcher.exit" and bool(suspects & set(cascade_classes))
    timeout = primary.role != "root" or primary.failure_class in suspects or timed_out_exit
    if not timeout:
        return None
    named = persistent(facts, primary.line)
    if not named:
        return None
    s = named[0]
    node = s["node"] if s["node"] is not None else primary.node
    return replace(primary, rank=s["rank"], node=node, rank_source="straggler")


def verdict_stragglers(
    facts: LauncherFacts | None, suspect_rank: int | None
) -> StragglerReport | None:
    """What `verdict.stragglers` holds: every named straggler, the per-node scores and the
    suspect rank (None when the rule did not apply); None when the launcher reported none."""
    if facts is None or (not facts.stragglers and not facts.straggler_scores):
        return None
    keep = ("rank", "node", "section", "relative", "individual", "threshold", "reports", "report")
    return StragglerReport(
        named=[{k: s.get(k) for k in keep} for s in facts.stragglers[:64]],
        persistent=[s["rank"] for s in persistent(facts)][:64],
        scores=facts.straggler_scores[:16],
        suspect_rank=suspect_rank,
        min_reports=MIN_REPORTS,
    )
