"""`relaunch analyze --db` over multi-cycle histories built from the realistic log corpus
(tests/fixtures/make_logs.py and the checked-in samples), through a real SQLite file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relaunch.restart_agent import analyze_file
from tests._cli_helpers import run_analyze
from tests._storage_helpers import REPO_ROOT, sqlite_url
from tests.fixtures.make_logs import make_log

SAMPLES = sorted((REPO_ROOT / "tests" / "fixtures" / "logs").glob("*.log"))


def history(tmp_path: Path, job: str, logs: list[str]) -> list[tuple[str, str]]:
    """Analyse `logs` as cycles 0, 1, ... of `job` (cycle numbers chosen by the CLI)."""
    db = sqlite_url(tmp_path)
    out = []
    for n, text in enumerate(logs):
        path = tmp_path / f"{job}.cycle_{n}.log"
        path.write_text(text)
        p = run_analyze(path, "--db", db, "--job-id", job, "--format", "json")
        assert p.returncode == 0, p.stderr
        v = json.loads(p.stdout)
        assert v["cycle"] == n
        out.append((v["decision"], v["rule"]))
    return out


def test_same_infrastructure_failure_without_progress_stops_after_three_retries(tmp_path):
    got = history(tmp_path, "xid", [make_log("xid", seed=7)] * 5)
    assert [d for d, _ in got] == ["RESTART", "RESTART", "RESTART", "STOP", "STOP"]
    assert got[3][1] == "stop.same_root_ceiling"


def test_hang_found_by_heartbeat_is_infrastructure(tmp_path):
    got = history(tmp_path, "hang", [make_log("hang", seed=3)] * 4)
    assert [d for d, _ in got] == ["RESTART", "RESTART", "RESTART", "STOP"]


def test_infrastructure_failure_with_progress_keeps_restarting(tmp_path):
    logs = [make_log("xid", seed=7, start_iteration=1 + 500 * n) for n in range(6)]
    got = history(tmp_path, "xid-moving", logs)
    assert [d for d, _ in got] == ["RESTART"] * 6
    assert all(rule == "restart.progress" for _, rule in got[1:])


def test_alternating_roots_hit_the_job_level_ceiling(tmp_path):
    logs = [make_log("xid" if n % 2 == 0 else "ecc", seed=n % 2) for n in range(6)]
    got = history(tmp_path, "alternating", logs)
    assert [d for d, _ in got] == ["RESTART"] * 5 + ["STOP"]
    assert got[5][1] == "stop.job_no_progress_ceiling"


def test_workload_bug_recurring_stops_at_the_second_cycle(tmp_path):
    got = history(tmp_path, "key", [make_log("key_error", seed=1)] * 2)
    assert got == [("RESTART", "restart.workload_first"), ("STOP", "stop.workload_recurrence")]


def test_workload_bug_with_progress_between_cycles_restarts(tmp_path):
    logs = [make_log("key_error", seed=1, start_iteration=1 + 300 * n) for n in range(3)]
    assert [d for d, _ in history(tmp_path, "key-moving", logs)] == ["RESTART"] * 3


def test_certain_workload_bug_stops_at_once(tmp_path):
    assert history(tmp_path, "syntax", [make_log("syntax_error", seed=2)])[0][0] == "STOP"


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.stem for p in SAMPLES])
def test_checked_in_samples_match_the_library(sample):
    p = run_analyze(sample, "--format", "json")
    assert p.returncode == 0, p.stderr
    cli = json.loads(p.stdout)
    lib = analyze_file(sample).to_dict()
    for key in ("decision", "rule", "basis", "primary", "cascades", "progress", "history"):
        assert cli[key] == lib[key], key
    text = run_analyze(sample)
    assert text.returncode == 0 and text.stdout.startswith(cli["decision"])
    if cli["primary"]:
        assert f"line {cli['primary']['line']}" in text.stdout


def test_samples_exist():
    assert len(SAMPLES) >= 3, "tests/fixtures/logs/ should hold the checked-in samples"
