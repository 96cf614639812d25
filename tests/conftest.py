"""The fixtures shared by the test folders, defined once (pytest finds them here).

The tests are grouped by the package they test, one folder each (docs/TESTS.md; each
folder's conftest.py says what it covers). Every fixture below stays here because more than
one folder uses it; a fixture only one folder uses belongs in that folder's conftest.py.
Shared helper modules (tests/_*.py), worker scripts (tests/workers/) and data
(tests/fixtures/) stay at tests/ root for the same reason.

- `service_factory`: start real `relaunch serve` processes (tests/_service_helpers.py).
- `db_url`: a history database URL, once SQLite in tmp_path and once PostgreSQL
  (skipped with the reason when RELAUNCH_TEST_PG_URL is not set).
- `repo`: an empty history repository on a SQLite file in tmp_path, closed afterwards.
- `llm_server` (one per module) / `key_file`: the loopback OpenAI-compatible server and an
  API key file for it (tests/_llm_helpers.py).

A module that needs something else under one of these names defines its own fixture,
which takes precedence in that module (e.g. a seeded `repo`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._storage_helpers import pg_url_or_skip, sqlite_url


@pytest.fixture
def service_factory(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Factory fixture: `service_factory(uds=False, token=None, ...)` -> RunningService;
    every service it started is stopped at the end of the test."""
    from tests._service_helpers import RunningService, start_service

    started: list[RunningService] = []
    counter = iter(range(1000))

    def make(**kw: Any) -> RunningService:
        kw.setdefault("name", f"svc{next(counter)}")
        svc = start_service(tmp_path, **kw)
        started.append(svc)
        return svc

    yield make
    for svc in started:
        svc.stop()
        if svc.uds is not None:
            with contextlib.suppress(OSError):
                svc.uds.unlink()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return sqlite_url(tmp_path)
    return pg_url_or_skip()


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Any]:
    from relaunch.storage import open_repository

    r = open_repository(sqlite_url(tmp_path))
    yield r
    r.close()


@pytest.fixture(scope="module")
def llm_server() -> Iterator[Any]:
    from tests._llm_server import LLMServer

    server = LLMServer().start()
    yield server
    server.stop()


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    from tests._llm_helpers import KEY

    path = tmp_path / "llm.key"
    path.write_text(KEY + "\n")
    return path
