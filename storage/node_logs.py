"""Per-node logs of a multi-node cycle and the launchers' leases on their jobs.

A cycle of a multi-node job is the whole job's cycle: each node's launcher registers its
own log (`register_node_log`), reports when its part ended (`end_node_log`, with the
log's size and SHA-256 at that moment), and the service analyses all of them as one cycle.
A (job, cycle, node) has one log, never overwritten: registering another path for it
raises `NodeLogConflict` (history is append-only).

Leases: each launcher renews a lease on its job while it runs (`renew_lease`) and releases
it when it ends (`release_lease`). `expire_leases(timeout)` records `lost` every running
job whose leases all expired (with when and which node was heard last), so a job whose
launchers vanished (SIGKILL, node loss) is never left `running`. A lease renewed after
that makes the job `running` again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from relaunch.storage import job_id as job_id_rule
from relaunch.storage.models import Cycle, CycleLog, Job, JobLease
from relaunch.storage.records import as_utc
from relaunch.storage.repository import HistoryRepository

MAX_NODE_CHARS = 255


class NodeLogConflict(ValueError):
    """A node's log of a cycle is already stored with another path."""


@dataclass(frozen=True)
class NodeLogRecord:
    """One node's log of a cycle, as stored."""

    node: str
    group_rank: int | None
    nodes_expected: int | None
    log_path: str
    log_size: int | None
    log_sha256: str | None
    host: str | None
    fr_dir: str | None
    registered_at: datetime
    ended_at: datetime | None
    outcome: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "group_rank": self.group_rank,
            "nodes_expected": self.nodes_expected,
            "log_path": self.log_path,
            "size": self.log_size,
            "sha256": self.log_sha256,
            "host": self.host,
            "fr_dir": self.fr_dir,
            "registered_at": self.registered_at.isoformat(),
            "ended_at": None if self.ended_at is None else self.ended_at.isoformat(),
            "outcome": self.outcome,
        }


def _now() -> datetime:
    return datetime.now(timezone.utc)


def check_node(node: Any) -> str:
    """A node id: a non-empty string of at most 255 printable characters."""
    if not isinstance(node, str) or not node or len(node) > MAX_NODE_CHARS:
        raise ValueError(f"node must be a string of 1-{MAX_NODE_CHARS} characters, got {node!r}")
    if not node.isprintable():
        raise ValueError(f"node {node!r}: must be printable")
    return node


def _record(row: CycleLog) -> NodeLogRecord:
    registered = as_utc(row.registered_at)
    assert registered is not None
    return NodeLogRecord(
        node=row.node,
        group_rank=row.group_rank,
        nodes_expected=row.nodes_expected,
        log_path=row.log_path,
        log_size=row.log_size,
        log_sha256=row.log_sha256,
        host=row.host,
        fr_dir=row.fr_dir,
        registered_at=registered,
        ended_at=as_utc(row.ended_at),
        outcome=row.outcome,
    )


def _cycle(session: Session, repo: HistoryRepository, job_id: str, cycle: int) -> Cycle:
    job = repo._job(session, job_id)
    assert job is not None
    row, created = repo._cycle_row(session, job, cycle)
    job.updated_at = _now()
    if created and job.ended_at is not None and job.last_cycle == cycle:
        # the same job id started again (a re-submitted job): it runs again
        job.state, job.exit_code, job.ended_at, job.end_reason = "running", None, None, None
    if row.started_at is None:
        row.started_at = _now()
    return row


def register_node_log(
    repo: HistoryRepository,
    job_id: str,
    cycle: int,
    node: str,
    log_path: str,
    *,
    group_rank: int | None = None,
    nodes_expected: int | None = None,
    host: str | None = None,
    fr_dir: str | None = None,
) -> NodeLogRecord:
    """Record that `node` writes `log_path` for (job, cycle). The same path again is a
    no-op (a retried request); another path raises `NodeLogConflict`."""
    job_id = job_id_rule.check(job_id)
    node = check_node(node)

    def op(session: Session) -> NodeLogRecord:
        c = _cycle(session, repo, job_id, cycle)
        row = session.scalars(
            select(CycleLog).where(CycleLog.cycle_pk == c.id, CycleLog.node == node)
        ).one_or_none()
        if row is not None:
            if row.log_path != log_path:
                raise NodeLogConflict(
                    f"job {job_id} cycle {cycle} node {node}: a log is already stored "
                    f"({row.log_path}); history is append-only"
                )
            return _record(row)
        row = CycleLog(
            cycle_pk=c.id,
            node=node,
            group_rank=group_rank,
            nodes_expected=nodes_expected,
            log_path=log_path,
            host=None if host is None else host[:255],
            fr_dir=fr_dir,
            registered_at=_now(),
        )
        session.add(row)
        session.flush()
        return _record(row)

    return repo._write_retrying(op)


def end_node_log(
    repo: HistoryRepository,
    job_id: str,
    cycle: int,
    node: str,
    *,
    outcome: str | None,
    size: int | None,
    sha256: str | None,
) -> NodeLogRecord | None:
    """Record that `node`'s part of the cycle ended, with its log's size and SHA-256.
    None when the node never registered a log for the cycle. An end already recorded is
    kept (the first report wins: append-only)."""
    job_id = job_id_rule.check(job_id)
    node = check_node(node)

    def op(session: Session) -> NodeLogRecord | None:
        row = session.execute(
            select(CycleLog)
            .join(Cycle, Cycle.id == CycleLog.cycle_pk)
            .join(Job, Job.id == Cycle.job_pk)
            .where(Job.job_id == job_id, Cycle.cycle == cycle, CycleLog.node == node)
        ).scalar_one_or_none()
        if row is None:
            return None
        if row.ended_at is None:
            row.ended_at = _now()
            row.outcome = outcome
            row.log_size = size
            row.log_sha256 = sha256
        return _record(row)

    return repo._write_retrying(op)


def node_logs(repo: HistoryRepository, job_id: str, cycle: int) -> list[NodeLogRecord]:
    """The node logs of (job, cycle), by group rank then node id."""
    with repo.read_session() as session:
        rows = session.execute(
            select(CycleLog)
            .join(Cycle, Cycle.id == CycleLog.cycle_pk)
            .join(Job, Job.id == Cycle.job_pk)
            .where(Job.job_id == job_id, Cycle.cycle == cycle)
        ).scalars()
        out = [_record(r) for r in rows]
    out.sort(key=lambda r: (r.group_rank if r.group_rank is not None else 1 << 30, r.node))
    return out


# -- leases -----------------------------------------------------------------------------


def renew_lease(
    repo: HistoryRepository,
    job_id: str,
    node: str,
    *,
    host: str | None = None,
    cycle: int | None = None,
) -> str:
    """Renew `node`'s lease on `job_id` (created when new); a `lost` job runs again.
    Returns the job's state."""
    job_id = job_id_rule.check(job_id)
    node = check_node(node)

    def op(session: Session) -> str:
        job = repo._job(session, job_id)
        assert job is not None
        now = _now()
        row = session.scalars(
            select(JobLease).where(JobLease.job_pk == job.id, JobLease.node == node)
        ).one_or_none()
        if row is None:
            row = JobLease(job_pk=job.id, node=node, renewed_at=now, released=False)
            session.add(row)
        row.renewed_at, row.released = now, False
        row.host = None if host is None else host[:255]
        if cycle is not None:
            row.cycle = cycle
        if job.state == "lost":
            job.state, job.ended_at, job.end_reason = "running", None, None
            job.updated_at = now
        return str(job.state)

    return repo._write_retrying(op)


def release_lease(repo: HistoryRepository, job_id: str, node: str) -> None:
    """`node`'s launcher ended (its job end is recorded): its lease no longer counts."""
    job_id = job_id_rule.check(job_id)
    node = check_node(node)

    def op(session: Session) -> None:
        job = repo._job(session, job_id, create=False)
        if job is None:
            return
        row = session.scalars(
            select(JobLease).where(JobLease.job_pk == job.id, JobLease.node == node)
        ).one_or_none()
        if row is not None:
            row.released = True

    repo._write_retrying(op)


def expire_leases(
    repo: HistoryRepository, timeout_s: float, *, now: datetime | None = None
) -> list[str]:
    """Record `lost` every `running` job whose unreleased leases were all last renewed
    more than `timeout_s` ago (its newest open cycle too). Returns the job ids marked."""
    when = now or _now()
    cutoff = when - timedelta(seconds=timeout_s)

    def expired(session: Session) -> bool:
        """Whether some running job's open leases are all older than the cutoff."""
        newest: dict[int, datetime | None] = {}
        rows = session.execute(
            select(JobLease.job_pk, JobLease.renewed_at)
            .join(Job, JobLease.job_pk == Job.id)
            .where(Job.state == "running", JobLease.released.is_(False))
        )
        for job_pk, renewed in rows:
            heard = as_utc(renewed)
            old = newest.get(job_pk)
            newest[job_pk] = heard if old is None or (heard is not None and heard > old) else old
        return any(h is None or h <= cutoff for h in newest.values())

    with repo.read_session() as session:  # a sweep that finds nothing writes nothing
        if not expired(session):
            return []

    def op(session: Session) -> list[str]:
        leases = session.execute(
            select(Job, JobLease)
            .join(JobLease, JobLease.job_pk == Job.id)
            .where(Job.state == "running")
        ).all()
        by_job: dict[int, tuple[Job, list[JobLease]]] = {}
        for job, lease in leases:
            by_job.setdefault(job.id, (job, []))[1].append(lease)
        marked: list[str] = []
        for job, all_rows in by_job.values():
            rows = [r for r in all_rows if not r.released]  # released: that launcher ended
            if not rows:
                continue
            last = max(rows, key=lambda r: as_utc(r.renewed_at) or cutoff)
            heard = as_utc(last.renewed_at)
            if heard is None or heard > cutoff:
                continue
            job.state = "lost"
            job.ended_at = job.updated_at = when
            host = f" ({last.host})" if last.host else ""
            job.end_reason = (
                f"no launcher renewed its lease for {timeout_s:g} s; last heard: node "
                f"{last.node}{host} at {heard.isoformat()}"
            )
            open_cycle = session.scalars(
                select(Cycle)
                .where(Cycle.job_pk == job.id, Cycle.outcome.is_(None))
                .order_by(Cycle.cycle.desc())
                .limit(1)
            ).one_or_none()
            if open_cycle is not None:  # the cycle it ran is never left `registered`
                open_cycle.outcome, open_cycle.end_reason = "lost", job.end_reason
                if open_cycle.status == "registered":
                    open_cycle.status = "ended"
            marked.append(job.job_id)
        return marked

    return repo._write_retrying(op)


def leases(repo: HistoryRepository, job_id: str) -> list[dict[str, Any]]:
    """The launchers' leases on `job_id`: node, host, renewed_at, released."""
    with repo.read_session() as session:
        rows = session.execute(
            select(JobLease).join(Job, Job.id == JobLease.job_pk).where(Job.job_id == job_id)
        ).scalars()
        return [
            {
                "node": r.node,
                "host": r.host,
                "renewed_at": as_utc(r.renewed_at),
                "released": r.released,
            }
            for r in rows
        ]
