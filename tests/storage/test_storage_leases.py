"""Leases of running jobs (storage.node_logs): a sweep marks `lost` only a running job whose
open leases are all older than the timeout, and a sweep that finds nothing writes nothing."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

from relaunch.storage import node_logs as nl
from relaunch.storage import open_repository
from tests._storage_helpers import sqlite_url


def test_a_sweep_marks_only_expired_jobs_and_writes_nothing_otherwise(tmp_path: Path) -> None:
    repo = open_repository(sqlite_url(tmp_path))
    try:
        for job in ("alive", "gone", "ended"):
            repo.register_cycle(job, 0, str(tmp_path / f"{job}.log"))
            repo.set_job_state(job, "running")
            nl.renew_lease(repo, job, "node0", host="h0")
        nl.renew_lease(repo, "gone", "node1")
        nl.release_lease(repo, "ended", "node0")  # its only launcher ended: not lost
        leases = {j: nl.leases(repo, j) for j in ("alive", "gone")}
        start = max(r["renewed_at"] for rows in leases.values() for r in rows)
        db = tmp_path / "relaunch.db"
        writer = sqlite3.connect(db, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:  # a sweep that finds nothing expired only reads: it neither waits nor fails
            assert nl.expire_leases(repo, 60, now=start + timedelta(seconds=30)) == []
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        nl.renew_lease(repo, "alive", "node0")  # renewed after every other lease
        later = nl.leases(repo, "alive")[0]["renewed_at"]
        gone = max(r["renewed_at"] for r in nl.leases(repo, "gone"))
        gap = (later - gone).total_seconds()
        assert gap > 0
        # at `later`, with a timeout of half the gap: both of gone's leases are older
        # than the timeout, alive's is not (no clock is waited on)
        assert nl.expire_leases(repo, gap / 2, now=later) == ["gone"]
        states = {j: repo.get_job(j).state for j in ("alive", "gone")}
        assert states == {"alive": "running", "gone": "lost"}
    finally:
        repo.close()
