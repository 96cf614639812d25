"""Storage: the database schema and the history repository. Nothing else writes SQL.

- `open_repository(url=None, *, max_cycles_per_job=10_000) -> HistoryRepository`: any
  SQLAlchemy URL; None means `sqlite:///$RELAUNCH_HOME/relaunch.db` (`RELAUNCH_HOME`
  defaults to `~/.relaunch`). Migrates the database to the Alembic head on open.
- `HistoryRepository` (storage.repository), `JobRecord`/`CycleRecord` (storage.records),
  the models (storage.models), `StorageError` for unusable databases (storage.db).

See docs/storage.md.
"""

from __future__ import annotations

from storage.db import StorageError, default_url, make_engine, relaunch_home
from storage.records import CycleRecord, JobRecord
from storage.repository import HistoryRepository

__all__ = [
    "CycleRecord",
    "HistoryRepository",
    "JobRecord",
    "StorageError",
    "default_url",
    "open_repository",
    "relaunch_home",
]


def open_repository(
    url: str | None = None, *, max_cycles_per_job: int = 10_000
) -> HistoryRepository:
    """Open (and migrate to head) the history database at `url` (None = default SQLite)."""
    from sqlalchemy.exc import DBAPIError, OperationalError

    from storage.migrate import upgrade_to_head

    engine = make_engine(url)
    try:
        upgrade_to_head(engine)
    except (OperationalError, DBAPIError) as exc:
        engine.dispose()
        orig = getattr(exc, "orig", None) or exc
        raise StorageError(
            f"cannot open database {engine.url.render_as_string(hide_password=True)}: "
            f"{str(orig).splitlines()[0][:300]}"
        ) from None
    return HistoryRepository(engine, max_cycles_per_job=max_cycles_per_job)
