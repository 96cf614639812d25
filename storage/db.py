"""Database URLs and engines: the default SQLite location, WAL mode, busy timeouts, write locks.

`default_url()` is `sqlite:///$RELAUNCH_HOME/relaunch.db` (`RELAUNCH_HOME` defaults to
`~/.relaunch`). `make_engine(url)` returns an SQLAlchemy engine for any URL; for SQLite
files it turns on WAL, a busy timeout and foreign keys, and makes every transaction started
through `writer(engine)` a `BEGIN IMMEDIATE` one, so that several processes writing the same
file queue up on the lock instead of failing with "database is locked" on a read-to-write
upgrade. Bad URLs raise `StorageError` with a one-line message.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from sqlalchemy.pool import StaticPool

from relaunch.storage.errors import StorageError, StorageUnavailable  # noqa: F401 - re-exported
from relaunch.storage.location import default_url, relaunch_home  # noqa: F401 - re-exported

SQLITE_BUSY_TIMEOUT_S = 60.0
_WRITE_OPTION = "relaunch_write"


def parse_url(url: str | None) -> URL:
    """Parse `url` (None = default), raising `StorageError` for anything unusable."""
    text = default_url() if url is None else str(url).strip()
    if not text:
        raise StorageError("empty database URL")
    try:
        parsed = make_url(text)
    except ArgumentError:
        raise StorageError(
            f"not a database URL: {text!r} (expected e.g. sqlite:///path/relaunch.db "
            "or postgresql+psycopg2://user:pass@host/db)"
        ) from None
    return parsed


def is_sqlite(url: URL) -> bool:
    return url.get_backend_name() == "sqlite"


def is_memory_sqlite(url: URL) -> bool:
    return is_sqlite(url) and url.database in (None, "", ":memory:")


def make_engine(url: str | None = None, **kwargs: Any) -> Engine:
    """Create the engine for `url` (None = default SQLite file), configured for safe sharing."""
    parsed = parse_url(url)
    if is_sqlite(parsed):
        return _sqlite_engine(parsed, **kwargs)
    try:
        return create_engine(parsed, pool_pre_ping=True, **kwargs)
    except NoSuchModuleError:
        raise StorageError(
            f"unsupported database URL scheme {parsed.drivername!r} "
            "(supported: sqlite, postgresql+psycopg2, or any installed SQLAlchemy dialect)"
        ) from None
    except ImportError as exc:
        raise StorageError(
            f"the driver for {parsed.drivername!r} is not installed ({exc.name or exc}); "
            "for PostgreSQL: pip install 'relaunch[postgres]'"
        ) from None


def writer(engine: Engine) -> Engine:
    """The same engine, but its transactions take the write lock at BEGIN (SQLite only)."""
    return engine.execution_options(**{_WRITE_OPTION: True})


def enable_wal(
    cur: Any,
    timeout_s: float = SQLITE_BUSY_TIMEOUT_S,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Switch the database of `cur` to WAL; return the journal mode it ends in.

    Switching a rollback-journal file to WAL writes its header, and when another connection
    holds the write lock SQLite answers "database is locked" at once, without calling the busy
    handler (waiting could deadlock a reader that wants to write). That is what two processes
    opening a brand-new database at the same moment meet, so the switch is retried here, for up
    to `timeout_s`, each try in its own statement so that the lock held by this reader is let go
    between tries. A file already in WAL (every open after the first) costs one read. The
    read itself waits through the busy handler, so the worst case is about twice `timeout_s`;
    only "locked"/"busy" errors are retried, the last one is raised as SQLite gave it.
    """
    deadline = time.monotonic() + timeout_s
    pause = 0.005
    while True:
        try:
            mode = str(cur.execute("PRAGMA journal_mode").fetchone()[0]).lower()
            if mode == "wal":
                return mode
            # A file system without shared memory keeps the old mode: SQLite says so, no error.
            return str(cur.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() >= deadline:
                raise
        sleep(pause)
        pause = min(pause * 2, 0.1)


def _sqlite_engine(url: URL, **kwargs: Any) -> Engine:
    memory = is_memory_sqlite(url)
    if not memory:
        path = Path(str(url.database)).expanduser()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create the directory of {path}: {exc.strerror}") from None
        if path.is_dir():
            raise StorageError(f"database path is a directory: {path}")
        url = url.set(database=str(path))
    connect_args = {"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False}
    if memory:
        kwargs.setdefault("poolclass", StaticPool)
    engine = create_engine(url, connect_args=connect_args, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy (not pysqlite) emit BEGIN, so we can choose BEGIN IMMEDIATE.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
            if not memory:
                enable_wal(cur)
                cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
        finally:
            cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        immediate = conn.get_execution_options().get(_WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine
