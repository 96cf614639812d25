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


def _stamped(minute: int, second: int, text: str) -> str:
    return f"[2026-03-01 10:{minute:02d}:{second:02d},000] {text}\n"


# Issue 24: a job that progressed once, then fails at startup with alternating roots and no
# progress line at all (logs of another launcher: no duration fact). The span of each log's
# own timestamps (under a minute) says each cycle was a startup failure, so the job ceiling
# ends it instead of "progress unknown" restarting it forever.
ROOTS = [
    "[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "[rank5]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
    "unhandled system error, NCCL version 2.21.5",
]


def _startup_failure(n: int) -> str:
    return (
        _stamped(0, 0, "torch.distributed.run: [INFO] starting 8 workers")
        + _stamped(0, 20, "loading checkpoint from /ckpt/iter_0001000")
        + ROOTS[n % 2]
        + "\n"
        + _stamped(0, 41, "torch.distributed.elastic: [ERROR] failed (exitcode: 1) local_rank: 3")
    )


def test_alternating_startup_roots_after_progress_reach_the_job_ceiling(tmp_path):
    progressed = (
        "".join(f" iteration {i}/ 10000 | lm loss: 2.0\n" for i in range(990, 1001))
        + "[rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    )
    logs = [progressed] + [_startup_failure(n) for n in range(6)]
    got = history(tmp_path, "alternating-after-progress", logs)
    # cycles 1-4 restart; cycle 5 is the 5th consecutive restart without progress
    assert [d for d, _ in got] == ["RESTART"] * 5 + ["STOP", "STOP"], got
    assert got[5][1] == "stop.job_no_progress_ceiling"
    assert all(rule == "restart.infrastructure" for _, rule in got[1:5]), got


def test_alternating_long_silent_cycles_after_progress_keep_restarting(tmp_path):
    # the same roots in cycles whose own timestamps span two hours: a silent job that may
    # have progressed is not a startup loop (progress unknown), so it is not stopped
    def long_cycle(n: int) -> str:
        return _stamped(0, 0, "starting") + ROOTS[n % 2] + "\n" + "[2026-03-01 12:00:00,000] x\n"

    progressed = "".join(f" iteration {i}/ 10000 | lm loss: 2.0\n" for i in range(990, 1001))
    got = history(tmp_path, "long-silent", [progressed] + [long_cycle(n) for n in range(6)])
    assert [d for d, _ in got] == ["RESTART"] * 7, got
    assert all(rule == "restart.progress_unknown" for _, rule in got[1:]), got
