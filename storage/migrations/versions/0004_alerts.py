"""Add the alerts table: which alerts (Slack) were sent per job, so dedup survives restarts.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02 19:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_pk", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=512), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_pk"], ["jobs.id"], name=op.f("fk_alerts_job_pk_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alerts")),
        sa.UniqueConstraint("job_pk", "key", name="uq_alerts_job_pk_key"),
    )


def downgrade() -> None:
    op.drop_table("alerts")
