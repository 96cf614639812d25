"""Straggler scores in storage (revision 0008): saved with the verdict or on their own,
read back per job and cycle, kept out of the light cycle listing, bad input refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import inspect

from relaunch.storage import open_repository
from relaunch.storage.migrate import head_revision
from tests._storage_helpers import sqlite_url

SCORES = {
    "named": [{"rank": 2, "node": "n0", "section": "fwd", "relative": 0.2, "reports": 2}],
    "persistent": [2],
    "scores": [{"node": "n0", "threshold": 0.7, "reports": 5, "ranks": {"0": {"relative": 1.0}}}],
    "suspect_rank": 2,
    "min_reports": 2,
}


def _verdict(**extra: object) -> dict:
    return {"decision": "RESTART", "rule": "restart.cascade_only", "basis": "b", **extra}


def test_migration_0008_adds_the_column(tmp_path: Path) -> None:
    repo = open_repository(sqlite_url(tmp_path))
    try:
        assert head_revision() >= "0008"  # 0008 added it; later revisions keep it
        cols = {c["name"] for c in inspect(repo.engine).get_columns("cycles")}
        assert "stragglers" in cols
    finally:
        repo.close()


def test_verdict_stragglers_are_kept_per_cycle_and_read_back(tmp_path: Path) -> None:
    repo = open_repository(sqlite_url(tmp_path))
    try:
        repo.register_cycle("j", 0, "/l/cycle_0.log")
        repo.save_verdict("j", 1, _verdict(stragglers=SCORES))
        repo.save_verdict("j", 2, _verdict(stragglers=None))  # no scores: nothing kept
        repo.save_stragglers("j", 3, {**SCORES, "suspect_rank": None})
        assert [c for c, _ in repo.stragglers("j")] == [1, 3]
        assert repo.stragglers("j", 1) == [(1, SCORES)]
        assert repo.stragglers("j", 3)[0][1]["suspect_rank"] is None
        assert repo.stragglers("j", 0) == [] and repo.stragglers("nope") == []
        rec = repo.get_cycle("j", 1)
        assert rec is not None and rec.stragglers == SCORES
        assert rec.to_dict()["stragglers"] == SCORES
        light = repo.list_cycles("j", with_verdict=False)
        assert all(c.stragglers is None for c in light)
        full = {c.cycle: c.stragglers for c in repo.list_cycles("j")}
        assert full[1] == SCORES and full[2] is None
    finally:
        repo.close()


def test_bad_straggler_input_is_refused_and_loses_nothing(tmp_path: Path) -> None:
    repo = open_repository(sqlite_url(tmp_path))
    try:
        repo.save_stragglers("j", 0, SCORES)
        with pytest.raises(ValueError, match="stragglers must be a dict"):
            repo.save_stragglers("j", 0, [1, 2])  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="not JSON-serialisable"):
            repo.save_stragglers("j", 0, {"x": float("nan")})
        with pytest.raises(ValueError):
            repo.stragglers("j", -1)
        assert repo.stragglers("j", 0) == [(0, SCORES)]
    finally:
        repo.close()
