"""Schema migrations: bring any database to the Alembic head revision, safely and quickly.

`upgrade_to_head(engine)` is called by `storage.open_repository` on every open. It first
compares the database's `alembic_version` with the head of `storage/migrations/versions/`
and returns at once when they match (the common case: a cheap query). Otherwise it runs the
upgrade inside one write transaction (`BEGIN IMMEDIATE` on SQLite, an advisory lock on
PostgreSQL), so that several processes opening a new database at the same time migrate it
exactly once.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

from relaunch.storage.db import writer

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
_PG_LOCK_KEY = 0x72656C61  # "rela"


def alembic_config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@lru_cache(maxsize=1)
def head_revision() -> str:
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"storage migrations must have one head, found {heads}")
    return heads[0]


def current_revision(conn: Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


def upgrade_to_head(engine: Engine) -> str:
    """Migrate the database behind `engine` to head; return the head revision."""
    head = head_revision()
    with engine.connect() as conn:
        current = current_revision(conn)
    if current == head:
        return head
    with writer(engine).begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
        if current_revision(conn) != head:  # another process may have just done it
            command.upgrade(alembic_config(conn), "head")
    return head
