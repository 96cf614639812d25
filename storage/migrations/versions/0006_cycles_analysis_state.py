"""Record analyses in flight: cycles.analysis_requested_at and cycles.analysis_error.

The service sets `analysis_requested_at` before it starts analysing a cycle and clears it
when the verdict is saved, so a service killed mid-analysis finds, on its next start, the
cycles whose analysis never finished: it resumes those whose log is still readable and
marks the others failed with the reason in `analysis_error`.

Revision ID: 0006
Revises: 0004
Create Date: 2026-12-03 07:45:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
# 0007 (job and cycle end) follows this one.
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ADD/DROP COLUMN (no batch copy of `cycles`, see 0007).


def upgrade() -> None:
    op.add_column(
        "cycles", sa.Column("analysis_requested_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("cycles", sa.Column("analysis_error", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("cycles", "analysis_error")
    op.drop_column("cycles", "analysis_requested_at")
