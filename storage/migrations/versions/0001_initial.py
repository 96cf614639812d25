"""Initial schema: jobs, cycles (log identity + verdict summary + JSON), evidence.

Revision ID: 0001
Revises:
Create Date: 2026-12-02 16:08:16.922169
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("cycle_count", sa.Integer(), nullable=False),
        sa.Column("last_cycle", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("job_id", name=op.f("uq_jobs_job_id")),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index("ix_jobs_updated_at", ["updated_at"], unique=False)

    op.create_table(
        "cycles",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_pk", sa.Integer(), nullable=False),
        sa.Column("cycle", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("node", sa.String(length=255), nullable=True),
        sa.Column("log_path", sa.Text(), nullable=True),
        sa.Column("log_size", sa.BigInteger(), nullable=True),
        sa.Column("log_sha256", sa.String(length=64), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("analysed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("decision", sa.String(length=16), nullable=True),
        sa.Column("rule", sa.String(length=128), nullable=True),
        sa.Column("basis", sa.Text(), nullable=True),
        sa.Column("fingerprint", sa.Text(), nullable=True),
        sa.Column("failure_class", sa.String(length=128), nullable=True),
        sa.Column("domain", sa.String(length=32), nullable=True),
        sa.Column("last_iteration", sa.BigInteger(), nullable=True),
        sa.Column("last_checkpoint", sa.Text(), nullable=True),
        sa.Column("progress_known", sa.Boolean(), nullable=True),
        sa.Column("llm_contributed", sa.Boolean(), nullable=True),
        sa.Column("verdict", sa.JSON(), nullable=True),
        sa.Column("fr_findings", sa.JSON(), nullable=True),
        sa.Column("llm", sa.JSON(), nullable=True),
        sa.Column("audit_path", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_pk"], ["jobs.id"], name=op.f("fk_cycles_job_pk_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cycles")),
        sa.UniqueConstraint("job_pk", "cycle", name="uq_cycles_job_pk_cycle"),
    )
    with op.batch_alter_table("cycles", schema=None) as batch_op:
        batch_op.create_index("ix_cycles_analysed_at", ["analysed_at"], unique=False)
        batch_op.create_index(
            "ix_cycles_failure_class_analysed_at", ["failure_class", "analysed_at"], unique=False
        )
        batch_op.create_index(
            "ix_cycles_fingerprint_analysed_at", ["fingerprint", "analysed_at"], unique=False
        )

    op.create_table(
        "evidence",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("cycle_pk", sa.Integer(), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("is_primary", sa.Boolean(), nullable=False),
        sa.Column("line", sa.BigInteger(), nullable=True),
        sa.Column("rank", sa.Integer(), nullable=True),
        sa.Column("pattern_id", sa.String(length=128), nullable=True),
        sa.Column("failure_class", sa.String(length=128), nullable=True),
        sa.Column("domain", sa.String(length=32), nullable=True),
        sa.Column("role", sa.String(length=32), nullable=True),
        sa.Column("recoverability", sa.String(length=32), nullable=True),
        sa.Column("fingerprint", sa.Text(), nullable=True),
        sa.Column("entity", sa.Text(), nullable=True),
        sa.Column("node", sa.String(length=255), nullable=True),
        sa.Column("text", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["cycle_pk"],
            ["cycles.id"],
            name=op.f("fk_evidence_cycle_pk_cycles"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evidence")),
    )
    with op.batch_alter_table("evidence", schema=None) as batch_op:
        batch_op.create_index("ix_evidence_cycle_pk_ordinal", ["cycle_pk", "ordinal"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("evidence", schema=None) as batch_op:
        batch_op.drop_index("ix_evidence_cycle_pk_ordinal")

    op.drop_table("evidence")
    with op.batch_alter_table("cycles", schema=None) as batch_op:
        batch_op.drop_index("ix_cycles_fingerprint_analysed_at")
        batch_op.drop_index("ix_cycles_failure_class_analysed_at")
        batch_op.drop_index("ix_cycles_analysed_at")

    op.drop_table("cycles")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_updated_at")

    op.drop_table("jobs")
