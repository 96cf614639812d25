"""Storage: the database schema and the history repository. Nothing else writes SQL.

- `open_repository(url=None, *, max_cycles_per_job=None) -> HistoryRepository`: any
  SQLAlchemy URL; None means `sqlite:///$RELAUNCH_HOME/relaunch.db` (`RELAUNCH_HOME`
  defaults to `~/.relaunch`). Migrates the database to the Alembic head on open. The
  per-job bound defaults to `$RELAUNCH_MAX_CYCLES_PER_JOB` or 10,000.
- `HistoryRepository` (storage.repository), `JobRecord`/`CycleRecord` (storage.records),
  the models (storage.models), `StorageError` for unusable databases (storage.db).

See docs/storage.md.

The names come from their modules on first use (PEP 562), so importing `storage.job_id`
(the job-id rule every package shares; `relaunch analyze` checks `--job-id` with it)
does not import SQLAlchemy (~0.35 s).
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from relaunch.storage.errors import StorageError, StorageUnavailable
    from relaunch.storage.location import default_url, relaunch_home
    from relaunch.storage.records import CycleRecord, JobRecord
    from relaunch.storage.repository import HistoryRepository

_LAZY = {
    "StorageError": "relaunch.storage.errors",
    "StorageUnavailable": "relaunch.storage.errors",
    "default_url": "relaunch.storage.location",
    "relaunch_home": "relaunch.storage.location",
    "make_engine": "relaunch.storage.db",
    "CycleRecord": "relaunch.storage.records",
    "JobRecord": "relaunch.storage.records",
    "HistoryRepository": "relaunch.storage.repository",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "CycleRecord",
    "HistoryRepository",
    "JobRecord",
    "StorageError",
    "StorageUnavailable",
    "default_url",
    "open_repository",
    "relaunch_home",
]


DEFAULT_MAX_CYCLES_PER_JOB = 10_000
MAX_CYCLES_ENV = "RELAUNCH_MAX_CYCLES_PER_JOB"


def max_cycles_from_env() -> int:
    """`$RELAUNCH_MAX_CYCLES_PER_JOB` (a positive integer), or 10,000."""
    from relaunch.storage.db import StorageError

    raw = os.environ.get(MAX_CYCLES_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_MAX_CYCLES_PER_JOB
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise StorageError(f"{MAX_CYCLES_ENV} must be a positive integer, got {raw!r}")
    return value


def open_repository(
    url: str | None = None, *, max_cycles_per_job: int | None = None
) -> HistoryRepository:
    """Open (and migrate to head) the history database at `url` (None = default SQLite).

    `max_cycles_per_job` bounds each job's stored cycles (oldest pruned); None means
    `$RELAUNCH_MAX_CYCLES_PER_JOB` or 10,000.
    """
    from sqlalchemy.exc import DBAPIError, OperationalError

    from relaunch.storage.db import StorageError, make_engine
    from relaunch.storage.migrate import upgrade_to_head
    from relaunch.storage.repository import HistoryRepository

    if max_cycles_per_job is None:
        max_cycles_per_job = max_cycles_from_env()
    if isinstance(max_cycles_per_job, bool) or max_cycles_per_job < 1:
        raise ValueError("max_cycles_per_job must be at least 1")
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
