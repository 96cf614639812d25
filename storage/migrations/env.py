"""Alembic environment for relaunch's schema.

Run programmatically by `storage.migrate.upgrade_to_head(engine)`, which passes an open
connection in `config.attributes["connection"]`. Developers can also run the `alembic`
command with `-c storage/alembic.ini -x url=sqlite:///path.db` (e.g. `revision --autogenerate`).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from relaunch.storage.db import make_engine
from relaunch.storage.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    engine = make_engine(url or None)
    with engine.connect() as conn:
        _run(conn)
        conn.commit()
    engine.dispose()


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url") or "sqlite://",
        target_metadata=target_metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
