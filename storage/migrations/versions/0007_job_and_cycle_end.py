"""Record how jobs and cycles end: jobs.exit_code/ended_at/end_reason, cycles.outcome/end_reason.

The launcher records the end of every cycle (`succeeded`, `failed`, `stopped`,
`interrupted`) and the job's final state with its exit code, so a finished job no longer
looks `running` with its last cycle `registered`.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 07:40:00

(Written as 0005 on a branch; 0006 landed first on 0004, so this one follows it: a
database already at 0006 gets these columns too.)
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE ADD/DROP COLUMN (SQLite >= 3.35 and PostgreSQL): a batch "move and
# copy" of `jobs` on SQLite would drop the old table, and its ON DELETE CASCADE would take
# every cycle with it.


def upgrade() -> None:
    op.add_column("jobs", sa.Column("exit_code", sa.Integer(), nullable=True))
    op.add_column("jobs", sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("jobs", sa.Column("end_reason", sa.Text(), nullable=True))
    op.add_column("cycles", sa.Column("outcome", sa.String(length=32), nullable=True))
    op.add_column("cycles", sa.Column("end_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("cycles", "end_reason")
    op.drop_column("cycles", "outcome")
    op.drop_column("jobs", "end_reason")
    op.drop_column("jobs", "ended_at")
    op.drop_column("jobs", "exit_code")
