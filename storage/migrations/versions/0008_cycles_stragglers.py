"""Keep straggler scores per cycle: cycles.stragglers (JSON).

What the launcher's straggler reports said about the cycle (docs/straggler.md): the ranks it
named, the per-node scores of every rank and the suspect rank, as the verdict's
`stragglers` field or as saved by `save_stragglers`.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 08:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ADD/DROP COLUMN (no batch copy of `cycles`, see 0005).


def upgrade() -> None:
    op.add_column("cycles", sa.Column("stragglers", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("cycles", "stragglers")
