"""`HistoryRepository`: the history of jobs, cycles and verdicts, over any SQLAlchemy database.

The only writer of the schema in `storage.models`. Every write is one short transaction
that takes the write lock first (SQLite `BEGIN IMMEDIATE`), so concurrent processes queue
instead of failing, and is an upsert on (job, cycle): re-analysing a cycle replaces its
verdict and evidence, never duplicates them. After a new cycle is added, the job's oldest
cycles beyond `max_cycles_per_job` are pruned in the same transaction, so history stays
bounded on disk whatever the job's length. Reads return `JobRecord`/`CycleRecord`
dataclasses and plain dicts, never ORM objects.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, TypeVar

from sqlalchemy import Engine, case, delete, func, insert, select
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.orm import Session, aliased, sessionmaker

from relaunch.restart_agent.model import Decision, Evidence, JobState, LLMInfo, Verdict
from relaunch.storage import job_id as job_id_rule
from relaunch.storage.db import StorageError, StorageUnavailable, writer
from relaunch.storage.job_end import verdict_effect
from relaunch.storage.models import AlertClaim, Cycle, EvidenceRow, Job
from relaunch.storage.records import CycleRecord, JobRecord, as_utc

T = TypeVar("T")

# Listings read plain columns (no ORM objects: ~10x faster for long histories); the JSON
# columns only when asked for.
_JSON_COLUMNS = ("verdict", "fr_findings", "llm", "node_health", "stragglers")
_LIST_COLUMNS = tuple(
    c for c in Cycle.__table__.columns if c.name not in _JSON_COLUMNS + ("id", "job_pk")
)
_LIST_COLUMNS_FULL = _LIST_COLUMNS + tuple(Cycle.__table__.columns[n] for n in _JSON_COLUMNS)

MAX_EVIDENCE_ROWS = 200
# plain strings (the column's values) in `JobState`'s order
JOB_STATES = tuple(s.value for s in JobState)
# set only by the launcher (end_job, set_job_state); a later verdict never overwrites them
FINAL_JOB_STATES = tuple(
    s.value for s in (JobState.SUCCEEDED, JobState.FAILED, JobState.INTERRUPTED)
)
# how a job ends (end_job) and how a cycle ends (end_cycle)
END_STATES = tuple(
    s.value for s in (JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED, JobState.INTERRUPTED)
)
CYCLE_OUTCOMES = END_STATES
_MAX_REASON = 2000


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _check_cycle(cycle: Any) -> int:
    if isinstance(cycle, bool) or not isinstance(cycle, int) or cycle < 0:
        raise ValueError(f"cycle must be a non-negative integer, got {cycle!r}")
    return cycle


def _check_json(name: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a dict, got {type(value).__name__}")
    try:
        # Round-trip: rejects what JSON cannot hold and detaches the caller's objects.
        return json.loads(json.dumps(value, allow_nan=False, default=_reject))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} is not JSON-serialisable: {exc}") from None


def _check_alert_key(key: Any) -> str:
    if not isinstance(key, str) or not key or len(key) > 512:
        raise ValueError("alert key must be a non-empty string of at most 512 characters")
    return key


def _reject(obj: Any) -> Any:
    raise TypeError(f"object of type {type(obj).__name__} is not JSON-serialisable")


_BIGINT = (-(2**63), 2**63 - 1)
_INTEGER = (-(2**31), 2**31 - 1)


def _int_or_none(value: Any, bounds: tuple[int, int] = _BIGINT) -> int | None:
    """`value` as an int for a column of `bounds`; None when absent or out of range (a
    number no database column can hold is no value, never a failed write)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float) and math.isfinite(value) and abs(value) < 2**64:
        value = int(value)
    if isinstance(value, int) and bounds[0] <= value <= bounds[1]:
        return value
    return None


def _str_or_none(value: Any, limit: int | None = None) -> str | None:
    if value is None:
        return None
    text = str(value)
    return text[:limit] if limit else text


MIN_FREE_BYTES = 1 << 20  # below this, writes are refused before SQLite fails mid-way
_FAULTS = ("disk is full", "readonly", "read-only", "disk i/o error", "unable to open")


def _is_storage_fault(exc: Exception) -> bool:
    text = str(getattr(exc, "orig", exc)).lower()
    return any(f in text for f in _FAULTS)


class DatabaseFile:
    """The SQLite file a repository opened: its (device, inode), checked before and after
    writes. None for PostgreSQL and in-memory SQLite."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        st = os.stat(self.path)
        self.identity = (st.st_dev, st.st_ino)

    @classmethod
    def of(cls, engine: Engine) -> DatabaseFile | None:
        url = engine.url
        if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
            return None
        try:
            return cls(str(url.database))
        except OSError:
            return None

    def check(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise StorageUnavailable(
                f"database file {self.path} was deleted under the service; restart it"
            ) from None
        except OSError as exc:
            raise StorageUnavailable(f"database file {self.path}: {exc.strerror}") from None
        if (st.st_dev, st.st_ino) != self.identity:
            raise StorageUnavailable(
                f"database file {self.path} was replaced under the service; restart it"
            )
        parent = os.path.dirname(self.path)
        if not os.access(parent, os.W_OK) or not os.access(self.path, os.W_OK):
            raise StorageUnavailable(f"database directory {parent} is not writable")
        try:
            vfs = os.statvfs(parent)
        except OSError:
            return
        if vfs.f_bavail * vfs.f_frsize < MIN_FREE_BYTES:
            raise StorageUnavailable(f"disk full: under {MIN_FREE_BYTES} bytes free at {parent}")


class HistoryRepository:
    """Jobs, cycles and verdicts. Thread-safe; share one per process."""

    def __init__(self, engine: Engine, *, max_cycles_per_job: int = 10_000) -> None:
        if isinstance(max_cycles_per_job, bool) or max_cycles_per_job < 1:
            raise ValueError("max_cycles_per_job must be at least 1")
        self.engine = engine
        self.max_cycles_per_job = int(max_cycles_per_job)
        self._read = sessionmaker(engine, expire_on_commit=False)
        self._write = sessionmaker(writer(engine), expire_on_commit=False)
        self._file = DatabaseFile.of(engine)  # SQLite: the file this repository opened

    # -- sessions (for storage/ query modules built on the models) -----------------------

    @contextmanager
    def read_session(self) -> Iterator[Session]:
        """A session for reads (no write lock). Only storage/ modules should use it."""
        with self._read() as session:
            yield session

    @contextmanager
    def write_session(self) -> Iterator[Session]:
        """A session in one write transaction, committed on success, rolled back on error."""
        with self._write.begin() as session:
            yield session

    def close(self) -> None:
        self.engine.dispose()

    def check_durable(self) -> None:
        """Raise `StorageUnavailable` when a write could not be kept: the SQLite file this
        repository opened was deleted or replaced, its directory is not writable, the disk
        is (nearly) full, or a `PRAGMA` probe fails. Cheap (a few syscalls); /healthz and
        every write call it."""
        if self._file is not None:
            self._file.check()
            try:
                with self.engine.connect() as conn:
                    conn.exec_driver_sql("PRAGMA schema_version").fetchone()
            except OperationalError as exc:
                raise StorageUnavailable(f"database probe failed: {_short(exc)}") from exc

    def _write_retrying(self, fn: Callable[[Session], T], attempts: int = 5) -> T:
        """Run `fn` in a write transaction; retry on a lost insert race (PostgreSQL).

        Nothing is acknowledged that is not durable: the database file is checked before
        and after the commit (`check_durable`); a write to a deleted file, a full disk or a
        read-only directory raises `StorageUnavailable` instead of returning."""
        if self._file is not None:
            self._file.check()
        for attempt in range(attempts):
            try:
                with self._write.begin() as session:
                    result = fn(session)
                if self._file is not None:
                    self._file.check()  # the commit went to the file we opened
                return result
            except IntegrityError:
                if attempt == attempts - 1:
                    raise
                time.sleep(0.01 * (attempt + 1))
            except OperationalError as exc:
                if _is_storage_fault(exc):
                    raise StorageUnavailable(f"database cannot be written: {_short(exc)}") from exc
                raise StorageError(f"database error: {_short(exc)}") from exc
        raise AssertionError("unreachable")

    # -- writes ----------------------------------------------------------------------------

    def _job(self, session: Session, job_id: str, *, create: bool = True) -> Job | None:
        """The job row, locked for this transaction (PostgreSQL: FOR UPDATE; SQLite: the
        transaction already holds the database write lock), created when missing."""
        job = session.scalars(
            select(Job).where(Job.job_id == job_id).with_for_update()
        ).one_or_none()
        if job is None and create:
            now = _now()
            job = Job(job_id=job_id, state="running", created_at=now, updated_at=now, cycle_count=0)
            session.add(job)
            session.flush()
        return job

    def _cycle_row(self, session: Session, job: Job, cycle: int) -> tuple[Cycle, bool]:
        row = session.scalars(
            select(Cycle).where(Cycle.job_pk == job.id, Cycle.cycle == cycle)
        ).one_or_none()
        if row is not None:
            return row, False
        row = Cycle(job_pk=job.id, cycle=cycle, status="registered")
        session.add(row)
        session.flush()
        job.cycle_count = (job.cycle_count or 0) + 1
        job.last_cycle = cycle if job.last_cycle is None else max(job.last_cycle, cycle)
        return row, True

    def _prune(self, session: Session, job: Job) -> None:
        excess = (job.cycle_count or 0) - self.max_cycles_per_job
        if excess <= 0:
            return
        old = list(
            session.scalars(
                select(Cycle.id)
                .where(Cycle.job_pk == job.id)
                .order_by(Cycle.cycle.asc())
                .limit(excess)
            )
        )
        session.execute(delete(EvidenceRow).where(EvidenceRow.cycle_pk.in_(old)))
        session.execute(delete(Cycle).where(Cycle.id.in_(old)))
        job.cycle_count -= len(old)

    def register_cycle(
        self,
        job_id: str,
        cycle: int,
        log_path: str | None,
        *,
        node: str | None = None,
        started_at: datetime | None = None,
    ) -> CycleRecord:
        """Record that cycle `cycle` of `job_id` started and writes `log_path`."""
        job_id, cycle = job_id_rule.check(job_id), _check_cycle(cycle)

        def op(session: Session) -> CycleRecord:
            job = self._job(session, job_id)
            assert job is not None
            newest = job.last_cycle is None or cycle > job.last_cycle
            row, created = self._cycle_row(session, job, cycle)
            if created and newest and job.ended_at is not None:
                # the same job id started again (a re-submitted job): it runs again
                job.state, job.exit_code, job.ended_at, job.end_reason = "running", None, None, None
            if log_path is not None:
                row.log_path = str(log_path)
            if node is not None:
                row.node = _str_or_none(node, 255)
            row.started_at = started_at or row.started_at or _now()
            job.updated_at = _now()
            if created:
                self._prune(session, job)
            return _cycle_record(row, job_id, with_evidence=False)

        return self._write_retrying(op)

    def log_conflict(
        self,
        job_id: str,
        cycle: int,
        *,
        log_path: str | None,
        sha256: str | None = None,
        appending: bool = False,
        node: str | None = None,
    ) -> str | None:
        """The append-only rule, in one place: why a log for (job, cycle, node) may not be
        stored now, or None.

        A cycle that has a verdict keeps the log it was decided on: different bytes
        (`sha256` differs from the stored digest), an append, or, when no digest is given,
        a log at another path is a conflict. The same log again (the same bytes, a
        re-registration of the same path) is not. A log of another node for the same cycle is not a re-upload (`node` given
        and the stored cycle names a different node)."""
        job_id, cycle = job_id_rule.check(job_id), _check_cycle(cycle)
        rec = self.get_cycle(job_id, cycle)
        if rec is None or rec.decision is None:
            return None
        if node is not None and rec.node is not None and str(rec.node) != str(node):
            return None
        what = f"cycle {cycle} of job {job_id!r} already has a stored log and verdict"
        if appending:
            return f"{what}; appending to it is refused (history is append-only)"
        if sha256 is not None and rec.log_sha256 is not None:  # the bytes decide
            if rec.log_sha256 == sha256:
                return None
            return f"{what}; a different upload is refused (history is append-only)"
        if log_path is not None and rec.log_path is not None and rec.log_path != log_path:
            return f"{what} (log {rec.log_path}); a log at another path is refused"
        return None

    def save_verdict(
        self,
        job_id: str,
        cycle: int,
        verdict: dict[str, Any],
        *,
        log_identity: dict[str, Any] | None = None,
        audit_path: str | None = None,
    ) -> CycleRecord:
        """Store the verdict of (job, cycle), replacing any earlier one and its evidence.

        `log_identity` is `{"path", "size", "sha256"}` of the analysed log (any may be None).
        A verdict on the job's latest cycle also sets the job's state in the same
        transaction: STOP -> "stopped", RESTART -> "running" (see `verdict_job_state`).
        """
        job_id, cycle = job_id_rule.check(job_id), _check_cycle(cycle)
        verdict = _check_json("verdict", verdict)
        v = Verdict.read(verdict)  # the JSON, read once; stored as it came
        if v is None:
            said = verdict.get("decision") if isinstance(verdict, dict) else None
            raise ValueError(f"verdict decision must be STOP or RESTART, got {said!r}")
        identity = dict(log_identity or {})

        def op(session: Session) -> CycleRecord:
            job = self._job(session, job_id)
            assert job is not None
            row, created = self._cycle_row(session, job, cycle)
            now = _now()
            _apply_verdict(row, verdict, v, now)
            if identity.get("path") is not None:
                row.log_path = str(identity["path"])
            if "size" in identity:
                row.log_size = _int_or_none(identity.get("size"))
            if "sha256" in identity:
                row.log_sha256 = _str_or_none(identity.get("sha256"), 64)
            if audit_path is not None:
                row.audit_path = str(audit_path)
            session.execute(delete(EvidenceRow).where(EvidenceRow.cycle_pk == row.id))
            rows = _evidence_rows(row.id, v)
            if rows:
                session.execute(insert(EvidenceRow), rows)
            job.updated_at = now
            state = verdict_job_state(job.state, v.decision, cycle, job.last_cycle)
            if state is not None and job.ended_at is None:  # an end recorded stands
                job.state = state
            if created:
                self._prune(session, job)
            return _cycle_record(row, job_id, with_evidence=False)

        return self._write_retrying(op)

    def _update_cycle(self, job_id: str, cycle: int, apply: Callable[[Cycle], None]) -> None:
        job_id, cycle = job_id_rule.check(job_id), _check_cycle(cycle)

        def op(session: Session) -> None:
            job = self._job(session, job_id)
            assert job is not None
            row, created = self._cycle_row(session, job, cycle)
            apply(row)
            job.updated_at = _now()
            if created:
                self._prune(session, job)

        self._write_retrying(op)

    def save_fr_findings(self, job_id: str, cycle: int, findings: dict[str, Any]) -> None:
        """Attach Flight Recorder findings (the JSON of `relaunch fr`) to a cycle."""
        findings = _check_json("findings", findings)
        self._update_cycle(job_id, cycle, lambda row: setattr(row, "fr_findings", findings))

    def save_node_health(self, job_id: str, cycle: int, record: dict[str, Any]) -> None:
        """Attach one node's health record (keyed by its `node`) to a cycle.

        A second record for the same node replaces the first; other nodes' records stay.
        The cycle is created when it is not known yet (a node can fail before cycle 0).
        """
        record = _check_json("record", record)
        node = record.get("node")
        if not isinstance(node, (str, int)) or isinstance(node, bool) or str(node) == "":
            raise ValueError("a node health record needs a 'node' name")

        def apply(row: Cycle) -> None:
            row.node_health = {**(row.node_health or {}), str(node): record}

        self._update_cycle(job_id, cycle, apply)

    def save_stragglers(self, job_id: str, cycle: int, stragglers: dict[str, Any]) -> None:
        """Keep a cycle's straggler scores (the shape of a verdict's `stragglers`: `named`,
        `persistent`, `scores`, `suspect_rank`), replacing earlier ones; a verdict that
        carries `stragglers` saves them too. The cycle is created when not known yet."""
        stragglers = _check_json("stragglers", stragglers)
        self._update_cycle(job_id, cycle, lambda row: setattr(row, "stragglers", stragglers))

    def stragglers(self, job_id: str, cycle: int | None = None) -> list[tuple[int, dict[str, Any]]]:
        """(cycle, straggler scores) of the job's cycles that have them, oldest first;
        `cycle` keeps that one only. An unknown job gives []."""
        job_id = job_id_rule.check(job_id)
        if cycle is not None:
            cycle = _check_cycle(cycle)

        def op(session: Session) -> list[tuple[int, dict[str, Any]]]:
            q = (
                select(Cycle.cycle, Cycle.stragglers)
                .join(Job, Job.id == Cycle.job_pk)
                .where(Job.job_id == job_id, Cycle.stragglers.is_not(None))
                .order_by(Cycle.cycle)
            )
            if cycle is not None:
                q = q.where(Cycle.cycle == cycle)
            return [(int(c), dict(s)) for c, s in session.execute(q) if isinstance(s, dict)]

        return self._reading(op)

    # -- analyses in flight (the service resumes them after a crash) ----------------------

    def mark_analysis_requested(self, job_id: str, cycle: int) -> None:
        """Record that an analysis of (job, cycle) is about to start; `save_verdict` or
        `mark_analysis_failed` ends it. A service killed in between finds the cycle in
        `unfinished_analyses` on its next start."""

        def apply(row: Cycle) -> None:
            row.analysis_requested_at = _now()

        self._update_cycle(job_id, cycle, apply)

    def mark_analysis_failed(self, job_id: str, cycle: int, reason: str) -> None:
        """End the requested analysis of (job, cycle) without a verdict, saying why (a
        verdict already stored stays)."""
        reason = str(reason)[:2000] or "analysis failed"

        def apply(row: Cycle) -> None:
            row.analysis_requested_at = None
            row.analysis_error = reason

        self._update_cycle(job_id, cycle, apply)

    def unfinished_analyses(self, *, limit: int = 100_000) -> list[tuple[str, int, str | None]]:
        """(job_id, cycle, log_path) of every cycle whose requested analysis never ended,
        oldest request first."""

        def op(session: Session) -> list[tuple[str, int, str | None]]:
            rows = session.execute(
                select(Job.job_id, Cycle.cycle, Cycle.log_path)
                .join(Job, Job.id == Cycle.job_pk)
                .where(Cycle.analysis_requested_at.is_not(None))
                .order_by(Cycle.analysis_requested_at.asc(), Cycle.id.asc())
                .limit(limit)
            )
            return [(j, int(c), p) for j, c, p in rows]

        return self._reading(op)

    def record_alert(self, job_id: str, key: str) -> bool:
        """Record that the alert `key` of a job was sent; False when it already was.

        Atomic across processes (the job row is locked and the key is unique), so after a
        service restart, or with two services on one database, `alert_recorded` says so."""
        job_id, key = job_id_rule.check(job_id), _check_alert_key(key)

        def op(session: Session) -> bool:
            job = self._job(session, job_id)
            assert job is not None
            if self._alert_id(session, job.id, key) is not None:
                return False
            session.add(AlertClaim(job_pk=job.id, key=key, sent_at=_now()))
            session.flush()
            return True

        try:
            return self._write_retrying(op)  # a lost race: the retry finds the key
        except IntegrityError:
            return False

    def alert_recorded(self, job_id: str, key: str) -> bool:
        """Whether the alert `key` of a job was sent (`record_alert`)."""
        job_id, key = job_id_rule.check(job_id), _check_alert_key(key)
        with self.read_session() as session:
            job_pk = session.scalar(select(Job.id).where(Job.job_id == job_id))
            return job_pk is not None and self._alert_id(session, job_pk, key) is not None

    @staticmethod
    def _alert_id(session: Session, job_pk: int, key: str) -> int | None:
        return session.scalars(
            select(AlertClaim.id).where(AlertClaim.job_pk == job_pk, AlertClaim.key == key)
        ).first()

    def save_llm(self, job_id: str, cycle: int, llm: dict[str, Any]) -> None:
        """Attach an LLM enrichment to a cycle (the deterministic verdict is left as it is)."""
        llm = _check_json("llm", llm)

        def apply(row: Cycle) -> None:
            row.llm = llm
            row.llm_contributed = bool(LLMInfo.from_dict(llm).contributed)

        self._update_cycle(job_id, cycle, apply)

    def set_audit_path(self, job_id: str, cycle: int, audit_path: str) -> None:
        """Record where the audit artifact of a cycle's verdict was written."""
        self._update_cycle(job_id, cycle, lambda row: setattr(row, "audit_path", str(audit_path)))

    def set_cycle_ended(self, job_id: str, cycle: int, ended_at: datetime | None = None) -> None:
        """Record when a cycle's workers ended (the launcher knows; analysis may come later)."""
        when = ended_at or _now()
        self._update_cycle(job_id, cycle, lambda row: setattr(row, "ended_at", when))

    def end_cycle(
        self,
        job_id: str,
        cycle: int,
        outcome: str,
        *,
        reason: str | None = None,
        ended_at: datetime | None = None,
    ) -> None:
        """Record how a cycle ended (`CYCLE_OUTCOMES`), as the launcher saw it.

        A cycle not analysed yet goes from `registered` to `ended`; an analysed cycle keeps
        its verdict and status. The cycle is created when it is not known yet.
        """
        if outcome not in CYCLE_OUTCOMES:
            raise ValueError(
                f"cycle outcome must be one of {', '.join(CYCLE_OUTCOMES)}; got {outcome!r}"
            )
        when = ended_at or _now()
        text = _str_or_none(reason, _MAX_REASON)

        def apply(row: Cycle) -> None:
            row.outcome, row.end_reason, row.ended_at = outcome, text, when
            if row.status == "registered":
                row.status = "ended"

        self._update_cycle(job_id, cycle, apply)

    def end_job(
        self, job_id: str, state: str, exit_code: int, *, reason: str | None = None
    ) -> None:
        """Record the job's final state (`END_STATES`) and the launcher's exit code.

        `succeeded`, `failed` and `interrupted` are never overwritten by a later verdict;
        a new cycle registered for the same job id (`register_cycle`) makes it `running`
        again and clears the end.
        """
        job_id = job_id_rule.check(job_id)
        if state not in END_STATES:
            raise ValueError(
                f"final job state must be one of {', '.join(END_STATES)}; got {state!r}"
            )
        if isinstance(exit_code, bool) or not isinstance(exit_code, int):
            raise ValueError(f"exit_code must be an integer, got {exit_code!r}")
        text = _str_or_none(reason, _MAX_REASON)

        def op(session: Session) -> None:
            job = self._job(session, job_id)
            assert job is not None
            now = _now()
            job.state, job.exit_code, job.end_reason = state, exit_code, text
            job.ended_at = job.updated_at = now

        self._write_retrying(op)

    def set_job_state(self, job_id: str, state: str) -> None:
        """Set a job's state: one of `JOB_STATES`."""
        job_id = job_id_rule.check(job_id)
        if state not in JOB_STATES:
            raise ValueError(f"job state must be one of {', '.join(JOB_STATES)}; got {state!r}")

        def op(session: Session) -> None:
            job = self._job(session, job_id)
            assert job is not None
            job.state = state
            job.updated_at = _now()

        self._write_retrying(op)

    def recount_job(self, job_id: str, *, prune: bool = True) -> JobRecord | None:
        """Recompute a job's `cycle_count`/`last_cycle` from its cycles (and prune to the bound).

        Writers that insert cycles in bulk, bypassing `save_verdict`/`register_cycle`
        (imports, benchmarks), must call this afterwards. None when there is no such job.
        """
        job_id = job_id_rule.check(job_id)

        def op(session: Session) -> bool:
            job = self._job(session, job_id, create=False)
            if job is None:
                return False
            n, top = session.execute(
                select(func.count(), func.max(Cycle.cycle)).where(Cycle.job_pk == job.id)
            ).one()
            job.cycle_count, job.last_cycle = int(n or 0), top
            if prune:
                self._prune(session, job)
            return True

        return self.get_job(job_id) if self._write_retrying(op) else None

    def delete_job(self, job_id: str) -> bool:
        """Delete a job and all its history; False when there was no such job."""
        job_id = job_id_rule.check(job_id)

        def op(session: Session) -> bool:
            job = self._job(session, job_id, create=False)
            if job is None:
                return False
            ids = select(Cycle.id).where(Cycle.job_pk == job.id).scalar_subquery()
            session.execute(delete(EvidenceRow).where(EvidenceRow.cycle_pk.in_(ids)))
            session.execute(delete(Cycle).where(Cycle.job_pk == job.id))
            session.delete(job)
            return True

        return self._write_retrying(op)

    # -- reads -----------------------------------------------------------------------------

    def _reading(self, fn: Callable[[Session], T]) -> T:
        try:
            with self._read() as session:
                return fn(session)
        except (OperationalError, DBAPIError) as exc:
            raise StorageError(f"database error: {_short(exc)}") from exc

    def prior_verdicts(
        self, job_id: str, before_cycle: int, *, limit: int | None = None
    ) -> list[tuple[int, dict[str, Any]]]:
        """Verdicts of the job's analysed cycles < `before_cycle`, oldest first.

        `limit` keeps only the most recent `limit` of them.
        """
        job_id, before_cycle = job_id_rule.check(job_id), _check_cycle(before_cycle)

        def op(session: Session) -> list[tuple[int, dict[str, Any]]]:
            q = (
                select(Cycle.cycle, Cycle.verdict)
                .join(Job, Job.id == Cycle.job_pk)
                .where(Job.job_id == job_id, Cycle.cycle < before_cycle, Cycle.verdict.is_not(None))
                .order_by(Cycle.cycle.desc())
            )
            if limit is not None:
                q = q.limit(limit)
            rows = [(c, v) for c, v in session.execute(q) if isinstance(v, dict)]
            rows.reverse()
            return rows

        return self._reading(op)

    def next_cycle(self, job_id: str, first: int = 0) -> int:
        """One more than the job's highest stored cycle, or `first` for a new job."""
        job_id = job_id_rule.check(job_id)

        def op(session: Session) -> int:
            top = session.scalar(
                select(func.max(Cycle.cycle))
                .join(Job, Job.id == Cycle.job_pk)
                .where(Job.job_id == job_id)
            )
            return first if top is None else int(top) + 1

        return self._reading(op)

    def allocate_cycle(self, job_id: str, first: int = 0) -> int:
        """Claim the job's next cycle number for the caller: one more than its highest
        stored cycle (`first` for a new job), registered in the same write transaction.

        The transaction takes the write lock first (SQLite `BEGIN IMMEDIATE`; PostgreSQL:
        the job row `FOR UPDATE`), so two processes allocating for one job queue and get
        different numbers; a lost insert race on the (job, cycle) unique constraint is
        retried. The claimed cycle is `registered` until its verdict is saved.
        """
        job_id, first = job_id_rule.check(job_id), _check_cycle(first)

        def op(session: Session) -> int:
            job = self._job(session, job_id)
            assert job is not None
            top = session.scalar(select(func.max(Cycle.cycle)).where(Cycle.job_pk == job.id))
            cycle = first if top is None else int(top) + 1
            _check_cycle(cycle)
            row, _ = self._cycle_row(session, job, cycle)
            row.started_at = _now()
            job.updated_at = _now()
            self._prune(session, job)
            return cycle

        return self._write_retrying(op)

    def get_cycle(self, job_id: str, cycle: int) -> CycleRecord | None:
        """One cycle with its verdict, evidence rows, FR findings and LLM enrichment."""
        job_id, cycle = job_id_rule.check(job_id), _check_cycle(cycle)

        def op(session: Session) -> CycleRecord | None:
            row = session.scalars(
                select(Cycle)
                .join(Job, Job.id == Cycle.job_pk)
                .where(Job.job_id == job_id, Cycle.cycle == cycle)
            ).one_or_none()
            return None if row is None else _cycle_record(row, job_id, with_evidence=True)

        return self._reading(op)

    def get_job(self, job_id: str) -> JobRecord | None:
        job_id = job_id_rule.check(job_id)
        jobs = self._list_jobs(job_id=job_id)
        return jobs[0] if jobs else None

    def list_jobs(self, *, limit: int | None = None) -> list[JobRecord]:
        """All jobs, most recently updated first, with their last cycle's verdict."""
        return self._list_jobs(limit=limit)

    def _list_jobs(self, *, job_id: str | None = None, limit: int | None = None) -> list[JobRecord]:
        def op(session: Session) -> list[JobRecord]:
            # the deciding verdict (as the dashboard's): a stopped job's STOP is not hidden
            # by a later cycle that was registered and never analysed
            q = (
                select(Job, Cycle)
                .outerjoin(Cycle, (Cycle.job_pk == Job.id) & (Cycle.cycle == _deciding_cycle()))
                .order_by(Job.updated_at.desc(), Job.id.desc())
            )
            if job_id is not None:
                q = q.where(Job.job_id == job_id)
            if limit is not None:
                q = q.limit(limit)
            out = []
            for job, cyc in session.execute(q):
                out.append(
                    JobRecord(
                        job_id=job.job_id,
                        state=job.state,
                        created_at=as_utc(job.created_at),
                        updated_at=as_utc(job.updated_at),
                        cycles=int(job.cycle_count or 0),
                        last_cycle=job.last_cycle,
                        last_decision=cyc.decision if cyc else None,
                        last_rule=cyc.rule if cyc else None,
                        last_failure_class=cyc.failure_class if cyc else None,
                        last_analysed_at=as_utc(cyc.analysed_at) if cyc else None,
                        exit_code=job.exit_code,
                        ended_at=as_utc(job.ended_at),
                        end_reason=job.end_reason,
                        decision_cycle=cyc.cycle if cyc else None,
                        verdict_effect=verdict_effect(
                            cyc.decision if cyc else None,
                            cyc.cycle if cyc else None,
                            job.last_cycle,
                            job.exit_code,
                            job.end_reason,
                            job.state,
                        ),
                    )
                )
            return out

        return self._reading(op)

    def list_cycles(
        self, job_id: str, *, with_verdict: bool = True, limit: int | None = None
    ) -> list[CycleRecord]:
        """The job's stored cycles, oldest first (evidence rows: see `get_cycle`).

        `with_verdict=False` leaves the JSON columns (verdict, FR findings, LLM) unread —
        much faster for long histories; `limit` keeps only the most recent `limit` cycles.
        """
        job_id = job_id_rule.check(job_id)

        def op(session: Session) -> list[CycleRecord]:
            cols = _LIST_COLUMNS_FULL if with_verdict else _LIST_COLUMNS
            q = (
                select(*cols)
                .join(Job, Job.id == Cycle.job_pk)
                .where(Job.job_id == job_id)
                .order_by(Cycle.cycle.desc())
            )
            if limit is not None:
                q = q.limit(limit)
            rows = _records(session.execute(q), job_id)
            rows.reverse()
            return rows

        return self._reading(op)

    def search(
        self,
        fingerprint: str | None = None,
        failure_class: str | None = None,
        limit: int = 100,
        *,
        job_id: str | None = None,
        decision: str | None = None,
    ) -> list[CycleRecord]:
        """Analysed cycles matching every given filter, most recently analysed first."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
            raise ValueError("limit must be an integer between 1 and 10000")

        def op(session: Session) -> list[CycleRecord]:
            q = (
                select(*_LIST_COLUMNS, Job.job_id.label("job_id"))
                .join(Job, Job.id == Cycle.job_pk)
                .where(Cycle.status == "analysed")
            )
            if fingerprint is not None:
                q = q.where(Cycle.fingerprint == fingerprint)
            if failure_class is not None:
                q = q.where(Cycle.failure_class == failure_class)
            if job_id is not None:
                q = q.where(Job.job_id == job_id)
            if decision is not None:
                q = q.where(Cycle.decision == decision)
            q = q.order_by(Cycle.analysed_at.desc(), Cycle.id.desc()).limit(limit)
            return _records(session.execute(q))

        return self._reading(op)

    # -- reads for the dashboard and the MCP server: the deciding verdict of each job -------

    def job_overviews(
        self,
        *,
        state: str | None = None,
        job_query: str | None = None,
        failure_class: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 500,
    ) -> list[dict[str, Any]]:
        """Jobs with their deciding verdict (see `_deciding_select`), failing jobs first.

        Order: stopped/failed jobs and jobs whose deciding verdict is STOP, then running
        jobs whose latest verdict is a RESTART (they are failing and being restarted),
        then the rest; most recently updated first within each. Filters (all optional,
        all must hold): `state` (one of `JOB_STATES`), `job_query` (case-insensitive
        substring of the job id), `failure_class` (of the deciding verdict), and a time
        window: jobs active in it (`updated_at >= since`, `created_at <= until`).
        """
        if state is not None and state not in JOB_STATES:
            raise ValueError(f"job state must be one of {', '.join(JOB_STATES)}; got {state!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100_000:
            raise ValueError("limit must be an integer between 1 and 100000")

        def op(session: Session) -> list[dict[str, Any]]:
            q, cyc = self._deciding_select()
            if state is not None:
                q = q.where(Job.state == state)
            if job_query:
                q = q.where(func.lower(Job.job_id).contains(job_query.lower(), autoescape=True))
            if failure_class:
                q = q.where(cyc.failure_class == failure_class)
            q = _window(q, since, until)
            failing = case(
                (Job.state.in_(("stopped", "failed")), 0),
                (cyc.decision == Decision.STOP.value, 0),
                ((Job.state == "running") & (cyc.decision == Decision.RESTART.value), 1),
                else_=2,
            )
            q = q.order_by(failing, Job.updated_at.desc(), Job.id.desc()).limit(limit)
            return [_overview(r) for r in session.execute(q).mappings()]

        return self._reading(op)

    def deciding_verdicts(self, job_ids: list[str]) -> dict[str, dict[str, Any]]:
        """{job_id: overview} (as `job_overviews` gives) of the given jobs that exist."""
        ids = [job_id_rule.check(j) for j in job_ids]
        if not ids:
            return {}

        def op(session: Session) -> dict[str, dict[str, Any]]:
            out: dict[str, dict[str, Any]] = {}
            for start in range(0, len(ids), 500):  # bounded IN lists
                q, _ = self._deciding_select()
                q = q.where(Job.job_id.in_(ids[start : start + 500]))
                for r in session.execute(q).mappings():
                    out[r["job_id"]] = _overview(r)
            return out

        return self._reading(op)

    def job_state_counts(
        self, *, since: datetime | None = None, until: datetime | None = None
    ) -> dict[str, int]:
        """{state: jobs} for every state in `JOB_STATES` (0 when none), plus "total",
        over the jobs active in the window (as in `job_overviews`)."""

        def op(session: Session) -> dict[str, int]:
            q = _window(select(Job.state, func.count()).group_by(Job.state), since, until)
            counts = dict.fromkeys(JOB_STATES, 0)
            for st, n in session.execute(q):
                counts[st] = counts.get(st, 0) + int(n)
            counts["total"] = sum(counts.values())
            return counts

        return self._reading(op)

    @staticmethod
    def _deciding_select() -> tuple[Any, Any]:
        """A select of every job joined with its deciding cycle and that cycle's primary
        evidence row, and the aliased deciding cycle (for filters).

        The deciding verdict is the job's latest STOP when the job is stopped or failed
        (a stopped job can have later cycles: registered, never analysed), otherwise the
        latest verdict of any kind. Jobs without any verdict have None columns."""

        chosen = _deciding_cycle()
        cyc = aliased(Cycle, name="deciding")
        ev = aliased(EvidenceRow, name="primary_ev")
        q = (
            select(
                Job.job_id,
                Job.state,
                Job.cycle_count,
                Job.last_cycle,
                Job.created_at,
                Job.updated_at,
                Job.exit_code,
                Job.ended_at,
                Job.end_reason,
                cyc.cycle.label("cycle"),
                cyc.decision,
                cyc.rule,
                cyc.basis,
                cyc.failure_class,
                cyc.fingerprint,
                cyc.node.label("cycle_node"),
                cyc.analysed_at,
                ev.rank.label("primary_rank"),
                ev.node.label("primary_node"),
            )
            .select_from(Job)
            .outerjoin(cyc, (cyc.job_pk == Job.id) & (cyc.cycle == chosen))
            .outerjoin(ev, (ev.cycle_pk == cyc.id) & ev.is_primary.is_(True))
        )
        return q, cyc


def _deciding_cycle() -> Any:
    """Per job (correlated): the cycle of its deciding verdict: the latest STOP when the
    job is stopped or failed (a stopped job can have later cycles: registered, never
    analysed), otherwise the latest verdict of any kind; None without any verdict."""

    # Per job, the newest cycle with a verdict (with a STOP): each one index walk
    # backwards over (job_pk, cycle), stopping at the first match.
    def newest(*where: Any) -> Any:
        inner = aliased(Cycle)
        return (
            select(inner.cycle)
            .where(inner.job_pk == Job.id, *[w(inner) for w in where])
            .order_by(inner.cycle.desc())
            .limit(1)
            .correlate(Job)
            .scalar_subquery()
        )

    latest = newest(lambda c: c.decision.is_not(None))
    stop = newest(lambda c: c.decision == Decision.STOP)
    return case(
        (Job.state.in_(("stopped", "failed")) & stop.is_not(None), stop),
        else_=latest,
    )


def verdict_job_state(
    current: str, decision: str, cycle: int, last_cycle: int | None
) -> str | None:
    """The job state a saved verdict implies, or None to leave the state as it is.

    Only a verdict on the job's latest cycle counts (re-deciding an old cycle, e.g. after
    an FR upload, says nothing about the job now). STOP -> "stopped"; RESTART ->
    "running" (the launcher restarts the workers: the job is running again). The final
    states a launcher sets with `set_job_state` ("succeeded", "failed") are kept.
    """
    if last_cycle is not None and cycle < last_cycle:
        return None
    if current in FINAL_JOB_STATES:
        return None
    return (JobState.STOPPED if decision == Decision.STOP else JobState.RUNNING).value


def _window(q: Any, since: datetime | None, until: datetime | None) -> Any:
    """Keep jobs active in [since, until]: updated at or after `since`, created by `until`."""
    if since is not None:
        q = q.where(Job.updated_at >= since.astimezone(timezone.utc))
    if until is not None:
        q = q.where(Job.created_at <= until.astimezone(timezone.utc))
    return q


def _overview(r: Any) -> dict[str, Any]:
    """One row of `_deciding_select` as a JSON-ready dict (the deciding verdict nested)."""
    decided = r["decision"] is not None
    return {
        "job_id": r["job_id"],
        "state": r["state"],
        "cycles": int(r["cycle_count"] or 0),
        "last_cycle": r["last_cycle"],
        "created_at": as_utc(r["created_at"]),
        "updated_at": as_utc(r["updated_at"]),
        "exit_code": r["exit_code"],
        "ended_at": as_utc(r["ended_at"]),
        "end_reason": r["end_reason"],
        "deciding": {
            "cycle": r["cycle"],
            "decision": r["decision"],
            "rule": r["rule"],
            "basis": r["basis"],
            "failure_class": r["failure_class"],
            "fingerprint": r["fingerprint"],
            "rank": r["primary_rank"],
            "node": r["primary_node"] or r["cycle_node"],
            "analysed_at": as_utc(r["analysed_at"]),
            "effect": verdict_effect(
                r["decision"],
                r["cycle"],
                r["last_cycle"],
                r["exit_code"],
                r["end_reason"],
                r["state"],
            ),
        }
        if decided
        else None,
    }


def _short(exc: Exception) -> str:
    orig = getattr(exc, "orig", None)
    return str(orig if orig is not None else exc).splitlines()[0][:300]


def _apply_verdict(row: Cycle, verdict: dict[str, Any], v: Verdict, now: datetime) -> None:
    """The cycle's columns from the verdict (`v`, read from `verdict`, the JSON stored whole)."""
    primary, progress = v.primary, v.progress
    stored_progress = verdict.get("progress")
    row.status = "analysed"
    row.verdict = verdict
    row.analysis_requested_at = None  # the analysis finished
    row.analysis_error = None
    row.decision = str(v.decision)
    row.rule = _str_or_none(str(v.rule) or None, 128)
    row.basis = _str_or_none(v.basis or None)
    row.fingerprint = _str_or_none(primary.fingerprint if primary else None)
    row.failure_class = _str_or_none(primary.failure_class if primary else None, 128)
    row.domain = _str_or_none(primary.domain if primary else None, 32)
    row.last_iteration = _int_or_none(progress.last_iteration)
    row.last_checkpoint = _str_or_none(progress.last_checkpoint)
    known_said = isinstance(stored_progress, dict) and "known" in stored_progress
    row.progress_known = bool(progress.known) if known_said else None
    row.llm_contributed = bool(v.llm.contributed)
    row.analysed_at = now
    row.ended_at = row.ended_at or now
    if v.stragglers is not None:
        row.stragglers = v.stragglers.to_dict()
    _apply_checkpoint(row, progress.checkpoint)


def _apply_checkpoint(row: Cycle, ck: Any) -> None:
    """The verdict's `progress.checkpoint` (the launcher's newest `checkpoint` fact) into
    the cycle's checkpoint columns; anything malformed leaves them empty."""
    if not isinstance(ck, dict):
        return
    step = _int_or_none(ck.get("step"))
    if step is None or step < 0:
        return
    size = _int_or_none(ck.get("size"))
    at = ck.get("at")
    when = None
    if isinstance(at, (int, float)) and not isinstance(at, bool) and 0 <= at < 1e10:
        when = datetime.fromtimestamp(float(at), tz=timezone.utc)
    row.checkpoint_step = step
    row.checkpoint_tier = _str_or_none(ck.get("tier"), 32)
    row.checkpoint_size = size if size is not None and size >= 0 else None
    row.checkpoint_at = when


def _evidence_rows(cycle_pk: int, verdict: Verdict) -> list[dict[str, Any]]:
    """Evidence rows (as dicts for one executemany insert): primary first, then the rest."""
    items: list[tuple[bool, Evidence]] = []
    primary = verdict.primary
    if primary is not None:
        items.append((True, primary))
    seen = {(primary.line, primary.pattern_id)} if primary is not None else set()
    for ev in verdict.evidence:
        if (ev.line, ev.pattern_id) in seen:
            continue
        seen.add((ev.line, ev.pattern_id))
        items.append((False, ev))
    return [
        {
            "cycle_pk": cycle_pk,
            "ordinal": ordinal,
            "is_primary": is_primary,
            "line": _int_or_none(ev.line),
            "rank": _int_or_none(ev.rank, _INTEGER),
            "pattern_id": _str_or_none(ev.pattern_id, 128),
            "failure_class": _str_or_none(ev.failure_class, 128),
            "domain": _str_or_none(ev.domain, 32),
            "role": _str_or_none(ev.role, 32),
            "recoverability": _str_or_none(ev.recoverability, 32),
            "fingerprint": _str_or_none(ev.fingerprint),
            "entity": _str_or_none(ev.entity),
            "node": _str_or_none(ev.node, 255),
            "text": _str_or_none(ev.text),
        }
        for ordinal, (is_primary, ev) in enumerate(items[:MAX_EVIDENCE_ROWS])
    ]


_EVIDENCE_FIELDS = (
    "line",
    "rank",
    "pattern_id",
    "failure_class",
    "domain",
    "role",
    "recoverability",
    "fingerprint",
    "entity",
    "node",
    "text",
)


_TIME_FIELDS = ("started_at", "ended_at", "analysed_at", "analysis_requested_at", "checkpoint_at")


def _records(result: Any, job_id: str | None = None) -> list[CycleRecord]:
    """CycleRecords from a Core result whose columns are named like CycleRecord's fields."""
    keys = list(result.keys())
    out = []
    for row in result:
        d = dict(zip(keys, row, strict=True))
        for k in _TIME_FIELDS:
            v = d.get(k)
            if v is not None and v.tzinfo is None:
                d[k] = v.replace(tzinfo=timezone.utc)
        if job_id is not None:
            d["job_id"] = job_id
        out.append(CycleRecord(**d))
    return out


def _cycle_record(
    row: Cycle, job_id: str, *, with_evidence: bool, with_verdict: bool = True
) -> CycleRecord:
    evidence = []
    if with_evidence:
        for ev in row.evidence:
            d = {k: getattr(ev, k) for k in _EVIDENCE_FIELDS}
            d["primary"] = bool(ev.is_primary)
            evidence.append(d)
    return CycleRecord(
        job_id=job_id,
        cycle=row.cycle,
        status=row.status,
        node=row.node,
        log_path=row.log_path,
        log_size=row.log_size,
        log_sha256=row.log_sha256,
        started_at=as_utc(row.started_at),
        ended_at=as_utc(row.ended_at),
        analysed_at=as_utc(row.analysed_at),
        decision=row.decision,
        rule=row.rule,
        basis=row.basis,
        fingerprint=row.fingerprint,
        failure_class=row.failure_class,
        domain=row.domain,
        last_iteration=row.last_iteration,
        last_checkpoint=row.last_checkpoint,
        progress_known=row.progress_known,
        llm_contributed=row.llm_contributed,
        verdict=row.verdict if with_verdict else None,
        fr_findings=row.fr_findings if with_verdict else None,
        node_health=row.node_health if with_verdict else None,
        llm=row.llm if with_verdict else None,
        audit_path=row.audit_path,
        analysis_requested_at=as_utc(row.analysis_requested_at),
        analysis_error=row.analysis_error,
        stragglers=row.stragglers if with_verdict else None,
        checkpoint_step=row.checkpoint_step,
        checkpoint_tier=row.checkpoint_tier,
        checkpoint_size=row.checkpoint_size,
        checkpoint_at=as_utc(row.checkpoint_at),
        outcome=row.outcome,
        end_reason=row.end_reason,
        evidence=evidence,
    )
