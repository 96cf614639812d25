"""Keep each cycle's newest complete checkpoint: cycles.checkpoint_step/_tier/_size/_at.

What `relaunch.checkpoint` reported to the launcher (its `checkpoint` fact, the verdict's
`progress.checkpoint`): the newest complete checkpoint of the cycle, its tier (local or
persistent), its size in bytes and when it became complete (docs/checkpointing.md). The
dashboard shows it with the time lost since it.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04 07:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ADD/DROP COLUMN (no batch copy of `cycles`, see 0005).


def upgrade() -> None:
    op.add_column("cycles", sa.Column("checkpoint_step", sa.BigInteger(), nullable=True))
    op.add_column("cycles", sa.Column("checkpoint_tier", sa.String(length=32), nullable=True))
    op.add_column("cycles", sa.Column("checkpoint_size", sa.BigInteger(), nullable=True))
    op.add_column("cycles", sa.Column("checkpoint_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    for name in ("checkpoint_at", "checkpoint_size", "checkpoint_tier", "checkpoint_step"):
        op.drop_column("cycles", name)
