"""Cycle numbers allocated by `relaunch analyze --db X --job-id J` without `--cycle`:
concurrent runs never share one, so no verdict overwrites another (issue 12, item 7)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from relaunch.storage import open_repository
from tests._storage_helpers import REPO_ROOT, infra_log, pg_url_or_skip, sqlite_url

LOOPS = 2
RUNS_PER_LOOP = 12


def _loop(cmds: list[list[str]], results: list[dict], errors: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    for cmd in cmds:
        p = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            errors.append(p.stderr)
        else:
            results.append(json.loads(p.stdout))


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_two_concurrent_analyze_loops_lose_no_verdict(tmp_path, backend):
    db = sqlite_url(tmp_path) if backend == "sqlite" else pg_url_or_skip()
    # one log per run (a log the history already knows is its own cycle again: issue 25)
    loops: list[list[list[str]]] = []
    for n in range(LOOPS):
        cmds = []
        for k in range(RUNS_PER_LOOP):
            log = tmp_path / f"cycle-{n}-{k}.log"
            log.write_text(infra_log())
            cmd = [sys.executable, "-m", "relaunch.cli", "analyze", str(log), "--db", db]
            cmds.append(cmd + ["--job-id", "same", "--format", "json"])
        loops.append(cmds)
    results: list[dict] = []
    errors: list[str] = []
    threads = [threading.Thread(target=_loop, args=(c, results, errors)) for c in loops]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    cycles = sorted(r["cycle"] for r in results)
    assert cycles == list(range(LOOPS * RUNS_PER_LOOP))  # every run got its own cycle
    repo = open_repository(db)
    try:
        rows = repo.list_cycles("same")
    finally:
        repo.close()
    assert [r.cycle for r in rows] == cycles
    assert all(r.verdict and r.verdict["decision"] in ("STOP", "RESTART") for r in rows)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_allocate_cycle_from_threads_gives_distinct_numbers(tmp_path, backend):
    url = sqlite_url(tmp_path) if backend == "sqlite" else pg_url_or_skip()
    repo = open_repository(url)
    job = f"alloc-{os.getpid()}-{backend}"
    got: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(15):
            c = repo.allocate_cycle(job)
            with lock:
                got.append(c)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert sorted(got) == list(range(60))
        assert repo.allocate_cycle(job) == 60
        assert repo.get_cycle(job, 60).status == "registered"
        assert repo.allocate_cycle("fresh-" + job, first=1) == 1
    finally:
        repo.delete_job(job)
        repo.delete_job("fresh-" + job)
        repo.close()
