"""Opening a brand-new SQLite history while another process is creating it.

The first open of a file switches it to WAL, which writes its header; when another connection
holds the write lock at that moment SQLite says "database is locked" at once, without calling
the busy handler. Two `relaunch analyze --db X` runs started together on a new file met that in
CI. `storage.db.enable_wal` retries the switch until the lock is free (bounded by the busy
timeout): these tests hold the lock from a raw `sqlite3` connection, as the other process would.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relaunch.storage import open_repository
from relaunch.storage.db import enable_wal
from tests._storage_helpers import REPO_ROOT, infra_log, sqlite_url


def _hold_write_lock(path: Path, *, with_table: bool) -> sqlite3.Connection:
    """A rollback-journal connection that holds the file's write lock (BEGIN IMMEDIATE)."""
    conn = sqlite3.connect(path, isolation_level=None)
    if with_table:
        conn.execute("CREATE TABLE other_writer (x)")
    conn.execute("BEGIN IMMEDIATE")
    if with_table:
        conn.execute("INSERT INTO other_writer VALUES (1)")
    return conn


@pytest.mark.parametrize("with_table", [False, True], ids=["empty-file", "rollback-file"])
def test_wal_switch_waits_for_the_writer_instead_of_failing(tmp_path, with_table):
    path = tmp_path / "new.db"
    holder = _hold_write_lock(path, with_table=with_table)
    pauses: list[float] = []

    def release_on_first_pause(seconds: float) -> None:
        pauses.append(seconds)
        if holder.in_transaction:
            holder.execute("COMMIT")  # the other process finishes its own first write

    conn = sqlite3.connect(path, timeout=5, isolation_level=None)
    try:
        assert enable_wal(conn.cursor(), sleep=release_on_first_pause) == "wal"
    finally:
        conn.close()
        holder.close()
    assert pauses, "the switch never met the held lock: the test did not test the retry"
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_wal_switch_gives_up_after_its_timeout_with_the_sqlite_error(tmp_path):
    path = tmp_path / "held.db"
    holder = _hold_write_lock(path, with_table=True)
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            enable_wal(conn.cursor(), timeout_s=0.05, sleep=lambda _s: None)
    finally:
        conn.close()
        holder.execute("COMMIT")
        holder.close()
    with sqlite3.connect(path) as check:  # nothing of the holder's was lost
        assert check.execute("SELECT x FROM other_writer").fetchall() == [(1,)]


def test_a_file_already_in_wal_is_left_as_it_is(tmp_path):
    path = tmp_path / "wal.db"
    repo = open_repository(sqlite_url(tmp_path, "wal.db"))
    repo.close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        assert enable_wal(conn.cursor()) == "wal"
    finally:
        conn.close()


_CLOCK_NANOSLEEP = {"x86_64": 230, "aarch64": 115}


def _sleeping(pid: int) -> bool:
    """Whether `pid` is in a timed sleep now (after opening the file: waiting on its lock)."""
    try:
        if "nanosleep" in Path(f"/proc/{pid}/wchan").read_text():
            return True
        number = Path(f"/proc/{pid}/syscall").read_text().split()[0]
    except (OSError, IndexError):
        return False
    return number.isdigit() and int(number) == _CLOCK_NANOSLEEP.get(os.uname().machine)


def _can_see_sleep() -> bool:
    probe = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        for _ in range(3000):
            if _sleeping(probe.pid):
                return True
            time.sleep(0.01)
        return False
    finally:
        probe.kill()
        probe.wait()


def _has_open(pid: int, path: Path) -> bool:
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(fd_dir / fd) == str(path) for fd in os.listdir(fd_dir))
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see the open file")
def test_analyze_on_a_new_database_another_process_is_writing_records_its_verdict(tmp_path):
    """`relaunch analyze --db` opens the file while a writer holds it; it waits, then records.

    The lock is let go only once the analyze process has the file open and sleeps (waiting
    for it): before the fix it failed at once with "database is locked" and never slept.
    """
    if not _can_see_sleep():
        pytest.skip("this kernel hides whether a process sleeps (/proc/PID/wchan and syscall)")
    path = tmp_path / "relaunch.db"
    holder = _hold_write_lock(path, with_table=False)
    log = tmp_path / "cycle.log"
    log.write_text(infra_log())
    cmd = [sys.executable, "-m", "relaunch.cli", "analyze", str(log), "--db", sqlite_url(tmp_path)]
    cmd += ["--job-id", "j", "--format", "json"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        # Polling for a state, not a timing assumption. Nothing else in `analyze` sleeps with
        # the file open before the WAL switch, so "open and sleeping" means "waiting for it".
        while proc.poll() is None and not (_has_open(proc.pid, path) and _sleeping(proc.pid)):
            time.sleep(0.01)
        assert proc.poll() is None, "analyze ended before it waited for the lock"
        holder.execute("COMMIT")
        out, _ = proc.communicate(timeout=300)
    finally:
        holder.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert json.loads(out)["decision"] in ("STOP", "RESTART")
    repo = open_repository(sqlite_url(tmp_path))
    try:
        assert [c.cycle for c in repo.list_cycles("j")] == [0]
    finally:
        repo.close()
