"""The database schema: SQLAlchemy 2 declarative models for jobs, cycles and evidence.

Only `storage/` touches SQL. Other storage modules (the repository, the service's and the
dashboard's query modules) build on these models; everything outside `storage/` sees plain
dicts/dataclasses. A change here needs a new Alembic revision in `storage/migrations/versions/`
(the test suite checks that the migrated schema equals these models).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

# Stable constraint names, so migrations can refer to them on every backend.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Job(Base):
    """One training job (the launcher's `--job-id`)."""

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_updated_at", "updated_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(255), nullable=False, unique=True)
    state: Mapped[str] = mapped_column(String(32), nullable=False, default="running")
    # Maintained by the repository on every write, so listing jobs never scans all cycles.
    cycle_count: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    last_cycle: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    # revision 0007: how the launcher ended the job (None while it runs)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    end_reason: Mapped[str | None] = mapped_column(Text)

    cycles: Mapped[list[Cycle]] = relationship(back_populates="job", passive_deletes=True)


class Cycle(Base):
    """One restart cycle of a job: its log's identity and, once analysed, its verdict."""

    __tablename__ = "cycles"
    __table_args__ = (
        UniqueConstraint("job_pk", "cycle", name="uq_cycles_job_pk_cycle"),
        Index("ix_cycles_fingerprint_analysed_at", "fingerprint", "analysed_at"),
        Index("ix_cycles_failure_class_analysed_at", "failure_class", "analysed_at"),
        Index("ix_cycles_analysed_at", "analysed_at"),
        Index("ix_cycles_log_path", "log_path"),  # revision 0002: GET /logs?log_path=
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_pk: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False)
    cycle: Mapped[int] = mapped_column(Integer, nullable=False)
    # "registered" (log known, running), "ended" (the launcher recorded its end, not
    # analysed), "analysed"
    status: Mapped[str] = mapped_column(String(32), nullable=False, default="registered")
    node: Mapped[str | None] = mapped_column(String(255))
    log_path: Mapped[str | None] = mapped_column(Text)
    log_size: Mapped[int | None] = mapped_column(BigInteger)
    log_sha256: Mapped[str | None] = mapped_column(String(64))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    analysed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Verdict summary columns (copied from the verdict JSON, for queries and indexes).
    decision: Mapped[str | None] = mapped_column(String(16))
    rule: Mapped[str | None] = mapped_column(String(128))
    basis: Mapped[str | None] = mapped_column(Text)
    fingerprint: Mapped[str | None] = mapped_column(Text)
    failure_class: Mapped[str | None] = mapped_column(String(128))
    domain: Mapped[str | None] = mapped_column(String(32))
    last_iteration: Mapped[int | None] = mapped_column(BigInteger)
    last_checkpoint: Mapped[str | None] = mapped_column(Text)
    progress_known: Mapped[bool | None] = mapped_column(Boolean)
    llm_contributed: Mapped[bool | None] = mapped_column(Boolean)
    verdict: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    fr_findings: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # revision 0003: node name -> the health record its launcher reported at this cycle's end
    node_health: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    llm: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    audit_path: Mapped[str | None] = mapped_column(Text)
    # revision 0006: an analysis requested and not finished (set before it starts, cleared
    # by its verdict), and why the last one failed
    analysis_requested_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    analysis_error: Mapped[str | None] = mapped_column(Text)
    # revision 0007: how the cycle ended, as the launcher saw it
    outcome: Mapped[str | None] = mapped_column(String(32))
    end_reason: Mapped[str | None] = mapped_column(Text)
    # revision 0008: the launcher's straggler scores of this cycle (docs/straggler.md)
    stragglers: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # revision 0010: the newest complete checkpoint of this cycle (relaunch.checkpoint's
    # report, the verdict's progress.checkpoint; docs/checkpointing.md)
    checkpoint_step: Mapped[int | None] = mapped_column(BigInteger)
    checkpoint_tier: Mapped[str | None] = mapped_column(String(32))
    checkpoint_size: Mapped[int | None] = mapped_column(BigInteger)
    checkpoint_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    job: Mapped[Job] = relationship(back_populates="cycles")
    evidence: Mapped[list[EvidenceRow]] = relationship(
        back_populates="cycle_row", passive_deletes=True, order_by="EvidenceRow.ordinal"
    )


class EvidenceRow(Base):
    """One evidence line of a cycle's verdict (primary first, then supporting lines)."""

    __tablename__ = "evidence"
    __table_args__ = (Index("ix_evidence_cycle_pk_ordinal", "cycle_pk", "ordinal"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cycle_pk: Mapped[int] = mapped_column(
        ForeignKey("cycles.id", ondelete="CASCADE"), nullable=False
    )
    ordinal: Mapped[int] = mapped_column(Integer, nullable=False)
    is_primary: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    line: Mapped[int | None] = mapped_column(BigInteger)
    rank: Mapped[int | None] = mapped_column(Integer)
    pattern_id: Mapped[str | None] = mapped_column(String(128))
    failure_class: Mapped[str | None] = mapped_column(String(128))
    domain: Mapped[str | None] = mapped_column(String(32))
    role: Mapped[str | None] = mapped_column(String(32))
    recoverability: Mapped[str | None] = mapped_column(String(32))
    fingerprint: Mapped[str | None] = mapped_column(Text)
    entity: Mapped[str | None] = mapped_column(Text)
    node: Mapped[str | None] = mapped_column(String(255))
    text: Mapped[str | None] = mapped_column(Text)

    cycle_row: Mapped[Cycle] = relationship(back_populates="evidence")


class AlertClaim(Base):
    """An alert already sent for a job (revision 0004): dedup that survives restarts.

    `key` names what was alerted, e.g. `slack:cycle:3:STOP` or `slack:recurring:<fp>`;
    inserting a key that exists fails, so one process wins a race to send."""

    __tablename__ = "alerts"
    __table_args__ = (UniqueConstraint("job_pk", "key", name="uq_alerts_job_pk_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_pk: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False)
    key: Mapped[str] = mapped_column(String(512), nullable=False)
    sent_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class CycleLog(Base):
    """One node's log of a multi-node cycle (revision 0009): never overwritten.

    A (cycle, node) has exactly one row; a second registration with another path is refused
    by `storage.node_logs`. `size`/`sha256` are taken when the node reports the end."""

    __tablename__ = "cycle_logs"
    __table_args__ = (UniqueConstraint("cycle_pk", "node", name="uq_cycle_logs_cycle_pk_node"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cycle_pk: Mapped[int] = mapped_column(
        ForeignKey("cycles.id", ondelete="CASCADE"), nullable=False
    )
    node: Mapped[str] = mapped_column(String(255), nullable=False)
    group_rank: Mapped[int | None] = mapped_column(Integer)
    nodes_expected: Mapped[int | None] = mapped_column(Integer)
    log_path: Mapped[str] = mapped_column(Text, nullable=False)
    log_size: Mapped[int | None] = mapped_column(BigInteger)
    log_sha256: Mapped[str | None] = mapped_column(String(64))
    host: Mapped[str | None] = mapped_column(String(255))
    fr_dir: Mapped[str | None] = mapped_column(Text)  # the node's Flight Recorder dump folder
    registered_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    outcome: Mapped[str | None] = mapped_column(String(32))


class JobLease(Base):
    """A launcher's lease on its running job (revision 0009): renewed while it runs; a job
    whose leases all expired is recorded `lost` (`storage.node_logs.expire_leases`)."""

    __tablename__ = "job_leases"
    __table_args__ = (UniqueConstraint("job_pk", "node", name="uq_job_leases_job_pk_node"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_pk: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False)
    node: Mapped[str] = mapped_column(String(255), nullable=False)
    host: Mapped[str | None] = mapped_column(String(255))
    cycle: Mapped[int | None] = mapped_column(Integer)
    renewed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    released: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
