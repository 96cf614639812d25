"""Index cycles.log_path: the NVRx `GET /logs?log_path=` lookup after a service restart.

Without it `find_cycle_by_log_path` scans every cycle (92 ms at 1,000,000 cycles).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 17:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("cycles", schema=None) as batch_op:
        batch_op.create_index("ix_cycles_log_path", ["log_path"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("cycles", schema=None) as batch_op:
        batch_op.drop_index("ix_cycles_log_path")
