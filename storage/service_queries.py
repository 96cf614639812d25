"""SQL the attribution service needs beyond `HistoryRepository`: built on storage.models.

- `find_cycle_by_log_path(repo, path)`: which (job, cycle) registered this log path (the
  NVRx `GET /logs?log_path=` lookup after a service restart).
- `bulk_insert_cycles(repo, job_id, rows)`: fast insertion of many analysed cycles (the
  service benchmark stores 1,000,000 of them).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import insert, select

from relaunch.storage.models import Cycle, Job
from relaunch.storage.repository import HistoryRepository

BULK_BATCH = 20_000
_CYCLE_COLUMNS = frozenset(c.name for c in Cycle.__table__.columns) - {"id", "job_pk"}


def find_cycle_by_log_path(repo: HistoryRepository, path: str) -> tuple[str, int] | None:
    """The most recently registered (job_id, cycle) whose log is `path`, or None."""
    with repo.read_session() as session:
        row = session.execute(
            select(Job.job_id, Cycle.cycle)
            .join(Job, Job.id == Cycle.job_pk)
            .where(Cycle.log_path == path)
            .order_by(Cycle.id.desc())
            .limit(1)
        ).first()
    return None if row is None else (str(row[0]), int(row[1]))


def bulk_insert_cycles(repo: HistoryRepository, job_id: str, rows: Iterable[dict[str, Any]]) -> int:
    """Insert analysed cycles of `job_id` in large batches; return how many.

    Each row is a dict of `cycles` columns (`cycle` required; unknown keys are an error).
    Meant for imports and benchmarks: evidence rows are not created; the job's summary is
    recounted (and pruned to the repository's per-job bound) once at the end.
    """
    now = datetime.now(timezone.utc)
    with repo.write_session() as session:
        job = session.scalars(select(Job).where(Job.job_id == job_id)).one_or_none()
        if job is None:
            job = Job(job_id=job_id, state="running", created_at=now, updated_at=now)
            session.add(job)
            session.flush()
        job_pk = job.id
    total = 0
    batch: list[dict[str, Any]] = []

    def flush() -> None:
        nonlocal total
        if batch:
            with repo.write_session() as s:
                s.execute(insert(Cycle), batch)
            total += len(batch)
            batch.clear()

    for row in rows:
        unknown = set(row) - _CYCLE_COLUMNS
        if unknown:
            raise ValueError(f"unknown cycle columns: {sorted(unknown)}")
        item = {"status": "analysed", "analysed_at": now, **row, "job_pk": job_pk}
        batch.append(item)
        if len(batch) >= BULK_BATCH:
            flush()
    flush()
    repo.recount_job(job_id)  # job summary columns (and the per-job bound)
    return total
