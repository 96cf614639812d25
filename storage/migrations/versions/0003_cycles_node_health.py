"""Add cycles.node_health: the health reports of nodes left out after a cycle.

A launcher whose node fails its health check before the next rendezvous reports it; the
verdict of the cycle records it (`restart.unhealthy_node_excluded`).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 19:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("cycles", schema=None) as batch_op:
        batch_op.add_column(sa.Column("node_health", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("cycles", schema=None) as batch_op:
        batch_op.drop_column("node_health")
