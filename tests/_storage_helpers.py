"""Helpers for the storage/engine/analyze tests: database URLs and small verdict dicts.

`sqlite_url(tmp_path)` gives a fresh SQLite file URL; `pg_url_or_skip()` gives the
PostgreSQL URL from RELAUNCH_TEST_PG_URL with an emptied schema, or skips with the reason.
`verdict(...)` builds a verdict dict of the shape `Verdict.to_dict()` returns.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def sqlite_url(tmp_path: Path, name: str = "relaunch.db") -> str:
    return f"sqlite:///{tmp_path / name}"


def pg_url_or_skip() -> str:
    url = os.environ.get("RELAUNCH_TEST_PG_URL")
    if not url:
        pytest.skip("RELAUNCH_TEST_PG_URL is not set (no PostgreSQL server for this run)")
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        pytest.skip("psycopg2 is not installed (pip install 'relaunch[postgres]')")
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            for table in ("evidence", "cycles", "jobs", "alembic_version"):
                conn.execute(text(f"DROP TABLE IF EXISTS {table} CASCADE"))
    except Exception as exc:
        pytest.skip(f"PostgreSQL at RELAUNCH_TEST_PG_URL is unreachable: {exc}")
    finally:
        engine.dispose()
    return url


def verdict(
    decision: str = "RESTART",
    *,
    rule: str = "default_restart",
    fingerprint: str | None = "cuda_oom:CUDA out of memory",
    failure_class: str | None = "cuda_oom",
    domain: str | None = "workload",
    line: int = 10,
    last_iteration: int | None = None,
    evidence_lines: tuple[int, ...] = (10, 12),
) -> dict[str, Any]:
    primary = None
    if fingerprint is not None:
        primary = {
            "line": line,
            "rank": 3,
            "pattern_id": failure_class,
            "failure_class": failure_class,
            "domain": domain,
            "role": "root",
            "recoverability": "retry",
            "text": f"error at line {line}",
            "fingerprint": fingerprint,
            "entity": None,
            "node": None,
        }
    evidence = [
        {**(primary or {}), "line": n, "text": f"evidence {n}"}
        for n in evidence_lines
    ]
    return {
        "decision": decision,
        "basis": f"{decision} because of a test",
        "rule": rule,
        "primary": primary,
        "cascades": [],
        "progress": {
            "known": last_iteration is not None,
            "last_iteration": last_iteration,
            "first_iteration": None,
            "last_checkpoint": None,
            "checkpoint_iteration": None,
            "dialect": None,
            "line": None,
        },
        "history": {"same_root_prior_cycles": 0},
        "budgets": {},
        "evidence": evidence,
        "fan_out": {},
        "fr": None,
        "llm": {"contributed": False},
        "scan": {},
    }
