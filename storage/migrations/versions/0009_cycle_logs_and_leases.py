"""Per-node logs of a multi-node cycle (cycle_logs) and launcher leases (job_leases).

A cycle of a multi-node job has one log per node; each is stored in its own row, never
overwritten (docs/service.md, "Multi-node"). Each launcher renews a lease on its job while
it runs; a job whose leases all expired is recorded `lost`.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 23:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "cycle_logs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("cycle_pk", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(length=255), nullable=False),
        sa.Column("group_rank", sa.Integer(), nullable=True),
        sa.Column("nodes_expected", sa.Integer(), nullable=True),
        sa.Column("log_path", sa.Text(), nullable=False),
        sa.Column("log_size", sa.BigInteger(), nullable=True),
        sa.Column("log_sha256", sa.String(length=64), nullable=True),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("fr_dir", sa.Text(), nullable=True),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(length=32), nullable=True),
        sa.ForeignKeyConstraint(
            ["cycle_pk"],
            ["cycles.id"],
            name=op.f("fk_cycle_logs_cycle_pk_cycles"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cycle_logs")),
        sa.UniqueConstraint("cycle_pk", "node", name="uq_cycle_logs_cycle_pk_node"),
    )
    op.create_table(
        "job_leases",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_pk", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("cycle", sa.Integer(), nullable=True),
        sa.Column("renewed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("released", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_pk"], ["jobs.id"], name=op.f("fk_job_leases_job_pk_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_leases")),
        sa.UniqueConstraint("job_pk", "node", name="uq_job_leases_job_pk_node"),
    )


def downgrade() -> None:
    op.drop_table("job_leases")
    op.drop_table("cycle_logs")
