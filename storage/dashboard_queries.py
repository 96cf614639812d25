"""Read-only queries of the dashboard that the repository does not offer (the only SQL of web/).

- `timeline(repo, job_id, limit=None)` — a job's cycles as light dicts (summary columns
  only, never the verdict/FR/LLM JSON), oldest first; `limit` keeps the most recent ones.
  This keeps the job page fast on jobs with thousands of cycles.
  Each row also has the first iteration the cycle reported (`first_iteration`, read
  from the verdict's progress by the database's JSON path operator) and where its
  primary failure landed (`primary_rank`, `primary_node`).
- `node_health_notes(repo, job_id, limit)` — node-health records stored on the job's
  cycles, newest first, flattened to one row per (cycle, node).
- `failure_classes(repo, limit)` — failure classes seen in the history with cycle and job
  counts, most frequent first (the search page's facets).
- `recurring_fingerprints(repo, limit)` — fingerprints seen in more than one cycle, most
  frequent first, with how many jobs they hit.
- `newest_checkpoints(repo, job_ids)` — each job's newest complete checkpoint (revision
  0010's per-cycle columns).

All take a `storage.HistoryRepository` and use its read session; results are plain dicts.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import case, func, select

from relaunch.restart_agent.model import Decision
from relaunch.storage.models import Cycle, EvidenceRow, Job
from relaunch.storage.records import as_utc

_TIMELINE_COLUMNS = (
    Cycle.cycle,
    Cycle.status,
    Cycle.node,
    Cycle.started_at,
    Cycle.ended_at,
    Cycle.analysed_at,
    Cycle.decision,
    Cycle.rule,
    Cycle.basis,
    Cycle.fingerprint,
    Cycle.failure_class,
    Cycle.domain,
    Cycle.last_iteration,
    Cycle.last_checkpoint,
    Cycle.llm_contributed,
    Cycle.checkpoint_step,
    Cycle.checkpoint_tier,
    Cycle.checkpoint_size,
    Cycle.checkpoint_at,
)


def _check_limit(limit: int | None, top: int = 100_000) -> None:
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= top
    ):
        raise ValueError(f"limit must be an integer between 1 and {top}")


def timeline(repo: Any, job_id: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Summary rows of a job's cycles, oldest first (the last `limit` when given)."""
    _check_limit(limit)
    with repo.read_session() as session:
        q = (
            select(
                *_TIMELINE_COLUMNS,
                Cycle.llm.is_not(None).label("has_llm"),
                Cycle.verdict[("progress", "first_iteration")]
                .as_integer()
                .label("first_iteration"),
                EvidenceRow.rank.label("primary_rank"),
                EvidenceRow.node.label("primary_node"),
            )
            .join(Job, Job.id == Cycle.job_pk)
            .outerjoin(
                EvidenceRow, (EvidenceRow.cycle_pk == Cycle.id) & EvidenceRow.is_primary.is_(True)
            )
            .where(Job.job_id == job_id)
            .order_by(Cycle.cycle.desc())
        )
        if limit is not None:
            q = q.limit(limit)
        rows = session.execute(q).mappings().all()
    out = []
    for r in reversed(rows):
        d = dict(r)
        for key in ("started_at", "ended_at", "analysed_at", "checkpoint_at"):
            d[key] = as_utc(d[key])
        d["job_id"] = job_id
        d["llm"] = {"stored": True} if d.pop("has_llm") else None
        out.append(d)
    return out


def failure_classes(repo: Any, limit: int = 50) -> list[dict[str, Any]]:
    """[{failure_class, cycles, jobs, stops}] over analysed cycles, most cycles first."""
    _check_limit(limit, 10_000)
    with repo.read_session() as session:
        q = (
            select(
                Cycle.failure_class,
                func.count().label("cycles"),
                func.count(func.distinct(Cycle.job_pk)).label("jobs"),
                func.sum(case((Cycle.decision == Decision.STOP.value, 1), else_=0)).label("stops"),
            )
            .where(Cycle.failure_class.is_not(None))
            .group_by(Cycle.failure_class)
            .order_by(func.count().desc(), Cycle.failure_class)
            .limit(limit)
        )
        return [
            {
                "failure_class": fc,
                "cycles": int(n),
                "jobs": int(j),
                "stops": int(s or 0),
            }
            for fc, n, j, s in session.execute(q)
        ]


def recurring_fingerprints(repo: Any, limit: int = 20) -> list[dict[str, Any]]:
    """[{fingerprint, failure_class, cycles, jobs}] of fingerprints seen in 2+ cycles."""
    _check_limit(limit, 10_000)
    with repo.read_session() as session:
        q = (
            select(
                Cycle.fingerprint,
                func.min(Cycle.failure_class),
                func.count().label("cycles"),
                func.count(func.distinct(Cycle.job_pk)).label("jobs"),
            )
            .where(Cycle.fingerprint.is_not(None))
            .group_by(Cycle.fingerprint)
            .having(func.count() > 1)
            .order_by(func.count().desc(), Cycle.fingerprint)
            .limit(limit)
        )
        return [
            {"fingerprint": fp, "failure_class": fc, "cycles": int(n), "jobs": int(j)}
            for fp, fc, n, j in session.execute(q)
        ]


def node_health_notes(repo: Any, job_id: str, limit: int = 50) -> list[dict[str, Any]]:
    """[{cycle, node, host, healthy, reason, excluded_from_cycle, failed_checks}] of the
    job's most recent `limit` cycles that carry node-health records, newest first."""
    _check_limit(limit, 10_000)
    with repo.read_session() as session:
        q = (
            select(Cycle.cycle, Cycle.node_health)
            .join(Job, Job.id == Cycle.job_pk)
            .where(Job.job_id == job_id, Cycle.node_health.is_not(None))
            .order_by(Cycle.cycle.desc())
            .limit(limit)
        )
        rows = session.execute(q).all()
    out = []
    for cycle, records in rows:
        if not isinstance(records, dict):
            continue
        for node, rec in sorted(records.items()):
            if not isinstance(rec, dict):
                continue
            checks = [c for c in rec.get("checks") or [] if isinstance(c, dict)]
            out.append(
                {
                    "cycle": cycle,
                    "node": str(node),
                    "host": rec.get("host"),
                    "healthy": rec.get("healthy") is True,
                    "reason": str(rec.get("reason") or ""),
                    "excluded_from_cycle": rec.get("excluded_from_cycle"),
                    "failed_checks": [
                        f"{c.get('name', '')} {c.get('status', '')}"
                        for c in checks
                        if c.get("status") in ("fail", "error")
                    ],
                }
            )
    return out


def _checkpoint_of(cycle: int, step: int, tier: Any, size: Any, at: Any) -> dict[str, Any]:
    return {"cycle": cycle, "step": step, "tier": tier, "size": size, "at": as_utc(at)}


def newest_checkpoints(repo: Any, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    """{job_id: newest complete checkpoint ({cycle, step, tier, size, at})} of the given
    jobs that reported one (the jobs list's checkpoint column)."""
    out: dict[str, dict[str, Any]] = {}
    with repo.read_session() as session:
        for start in range(0, len(job_ids), 500):  # bounded IN lists
            q = (
                select(
                    Job.job_id,
                    Cycle.cycle,
                    Cycle.checkpoint_step,
                    Cycle.checkpoint_tier,
                    Cycle.checkpoint_size,
                    Cycle.checkpoint_at,
                )
                .join(Job, Job.id == Cycle.job_pk)
                .where(
                    Job.job_id.in_(job_ids[start : start + 500]),
                    Cycle.checkpoint_step.is_not(None),
                )
                .order_by(Job.job_id, Cycle.checkpoint_step, Cycle.cycle)
            )
            for job_id, cycle, step, tier, size, at in session.execute(q):
                out[job_id] = _checkpoint_of(cycle, step, tier, size, at)  # the last wins
    return out
