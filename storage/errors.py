"""The storage package's errors (stdlib only: naming them imports no SQLAlchemy, so
`relaunch analyze` without a history stays light)."""

from __future__ import annotations


class StorageError(Exception):
    """The database cannot be used as asked: bad URL, unreachable server, unwritable file."""


class StorageUnavailable(StorageError):
    """The database cannot keep a write now (its file deleted or replaced, the disk full,
    the directory read-only): the service answers 503 and acknowledges nothing."""
