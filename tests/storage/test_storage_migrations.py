"""Alembic migrations: the migrated schema equals the models; upgrade/downgrade round trip."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from relaunch.storage import open_repository
from relaunch.storage.db import make_engine
from relaunch.storage.migrate import alembic_config, head_revision, upgrade_to_head
from relaunch.storage.models import Base
from tests._storage_helpers import sqlite_url, verdict


def test_one_head_and_initial_revision_creates_everything():
    script = ScriptDirectory.from_config(alembic_config())
    assert script.get_heads() == [head_revision()]
    base = [r for r in script.walk_revisions() if r.down_revision is None]
    assert [r.revision for r in base] == ["0001"]


def test_migrated_schema_equals_the_models(db_url):
    repo = open_repository(db_url)
    with repo.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        assert ctx.get_current_revision() == head_revision()
        diff = compare_metadata(ctx, Base.metadata)
    assert diff == [], f"models and migrations differ; add a revision: {diff}"
    tables = set(inspect(repo.engine).get_table_names())
    assert {"jobs", "cycles", "evidence", "alembic_version"} <= tables
    repo.close()


def test_downgrade_to_base_then_open_migrates_again(db_url):
    repo = open_repository(db_url)
    repo.save_verdict("j", 0, verdict())
    with repo.engine.begin() as conn:
        command.downgrade(alembic_config(conn), "base")
    assert "cycles" not in inspect(repo.engine).get_table_names()
    repo.close()
    repo = open_repository(db_url)
    assert repo.list_jobs() == []
    repo.save_verdict("j", 0, verdict())
    assert repo.get_cycle("j", 0) is not None
    repo.close()


def test_upgrade_is_a_no_op_at_head(tmp_path):
    engine = make_engine(sqlite_url(tmp_path))
    assert upgrade_to_head(engine) == head_revision()
    before = (tmp_path / "relaunch.db").stat().st_mtime_ns
    assert upgrade_to_head(engine) == head_revision()
    with engine.connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() == head_revision()
    assert (tmp_path / "relaunch.db").stat().st_mtime_ns == before
    engine.dispose()


def _index_names(engine, table: str) -> set[str]:
    return {ix["name"] for ix in inspect(engine).get_indexes(table)}


def test_0002_adds_the_log_path_index_and_keeps_data(db_url):
    """A database left at 0001 (with history) is upgraded on open: the rows stay, the
    index appears; downgrading to 0001 removes only the index."""
    repo = open_repository(db_url)
    repo.register_cycle("j", 0, "/logs/a.log")
    repo.save_verdict("j", 1, verdict(), log_identity={"path": "/logs/b.log"})
    with repo.engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0001")
    assert "ix_cycles_log_path" not in _index_names(repo.engine, "cycles")
    repo.close()
    repo = open_repository(db_url)
    assert "ix_cycles_log_path" in _index_names(repo.engine, "cycles")
    assert [c.cycle for c in repo.list_cycles("j")] == [0, 1]
    from relaunch.storage.service_queries import find_cycle_by_log_path

    assert find_cycle_by_log_path(repo, "/logs/b.log") == ("j", 1)
    repo.close()


def test_0003_adds_node_health_and_keeps_data(db_url):
    """At 0002 the column is absent; opening upgrades and the stored rows stay."""
    repo = open_repository(db_url)
    repo.save_verdict("j", 0, verdict(), log_identity={"path": "/logs/a.log"})
    with repo.engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0002")
    assert "node_health" not in {c["name"] for c in inspect(repo.engine).get_columns("cycles")}
    repo.close()
    repo = open_repository(db_url)
    assert "node_health" in {c["name"] for c in inspect(repo.engine).get_columns("cycles")}
    assert repo.get_cycle("j", 0).verdict == verdict()
    repo.save_node_health("j", 0, {"node": "n1", "healthy": False})
    assert repo.get_cycle("j", 0).node_health == {"n1": {"node": "n1", "healthy": False}}
    repo.close()


def test_log_path_lookup_uses_the_index(tmp_path):
    from sqlalchemy import text

    repo = open_repository(sqlite_url(tmp_path))
    with repo.engine.connect() as conn:
        plan = conn.execute(
            text("EXPLAIN QUERY PLAN SELECT id FROM cycles WHERE log_path = :p ORDER BY id DESC"),
            {"p": "/x.log"},
        ).fetchall()
    assert any("ix_cycles_log_path" in str(row) for row in plan), plan
    repo.close()


def test_0007_adds_the_end_columns_and_keeps_data(db_url):
    """At 0006 the end columns are absent; opening upgrades, and no job or cycle is lost
    (a batch copy of `jobs` on SQLite would have cascaded into the cycles)."""
    repo = open_repository(db_url)
    repo.save_verdict("j", 0, verdict(), log_identity={"path": "/logs/a.log"})
    repo.register_cycle("j", 1, "/logs/b.log")
    repo.end_job("j", "failed", 1)
    with repo.engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0006")
    assert "exit_code" not in {c["name"] for c in inspect(repo.engine).get_columns("jobs")}
    assert "outcome" not in {c["name"] for c in inspect(repo.engine).get_columns("cycles")}
    repo.close()
    repo = open_repository(db_url)
    assert [c.cycle for c in repo.list_cycles("j")] == [0, 1]
    assert repo.get_cycle("j", 0).verdict == verdict()
    job = repo.get_job("j")
    assert (job.state, job.exit_code) == ("failed", None)
    repo.end_cycle("j", 1, "failed", reason="rank 0 exited with code 1")
    repo.end_job("j", "failed", 1)
    assert repo.get_cycle("j", 1).outcome == "failed"
    assert repo.get_job("j").exit_code == 1
    repo.close()
