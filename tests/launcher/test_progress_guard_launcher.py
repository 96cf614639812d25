"""The launcher's progress guard through real `relaunch run` processes (attribution off)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests._launcher_helpers import (
    REPO,
    cycle_logs,
    engine_available,
    facts_of,
    job_args,
    read_log,
    run_relaunch,
    run_two_nodes,
)

WORKER = REPO / "tests" / "workers" / "progress_job.py"


def _args(tmp_path: Path, job: str, mode: str, *extra: str) -> list[str]:
    return job_args(
        tmp_path,
        job,
        "--nproc-per-node",
        "1",
        "--ft-attribution-endpoint",
        "off",
        *extra,
        str(WORKER),
        "--mode",
        mode,
    )


def test_no_progress_ends_the_job_after_n_restarts(tmp_path: Path) -> None:
    r = run_relaunch(
        tmp_path,
        _args(
            tmp_path, "stuck", "stuck", "--max-restarts", "10", "--ft-max-no-progress-cycles", "2"
        ),
    )
    assert r.returncode == 5, r.stderr
    # cycle 0 gives the first report (progress: no baseline), cycles 1 and 2 add nothing
    assert cycle_logs(tmp_path, "stuck") == ["cycle_0.log", "cycle_1.log", "cycle_2.log"]
    assert (
        "relaunch: job stuck ended by the launcher: no progress: 2 consecutive restarts "
        "without a higher iteration than 5 (--ft-max-no-progress-restarts 2)"
    ) in r.stderr
    assert "progress guard: cycle 1 made no progress" in r.stderr
    log2 = read_log(tmp_path, "stuck", 2)
    assert "[relaunch] job ended (exit code 5): no progress: 2 consecutive restarts" in log2
    guard = facts_of(read_log(tmp_path, "stuck", 1), "progress_guard")
    assert guard == [
        {
            "fact": "progress_guard",
            "cycle": 0,
            "progressed": True,
            "best_before": None,
            "best": 5,
            "count": 0,
            "limit": 2,
        }
    ]
    # each judgement is written where the next cycle starts; the last one after cycle 2 ends
    last = facts_of(log2, "progress_guard")
    assert [(f["cycle"], f["progressed"], f["count"]) for f in last] == [
        (1, False, 1),
        (2, False, 2),
    ]
    assert log2.index('"fact":"cycle_end"') < log2.index("job ended (exit code 5)")


def test_job_end_is_recorded_with_its_reason(tmp_path: Path) -> None:
    """With the embedded history, the job's end says why (as other terminal ends)."""
    reason = engine_available()
    if reason:
        pytest.skip(reason)
    from relaunch.storage import open_repository

    db = tmp_path / "h.db"
    r = run_relaunch(
        tmp_path,
        job_args(
            tmp_path,
            "rec",
            "--nproc-per-node",
            "1",
            "--max-restarts",
            "10",
            "--ft-max-no-progress-restarts",
            "1",
            "--ft-db-url",
            f"sqlite:///{db}",
            str(WORKER),
            "--mode",
            "stuck",
        ),
        timeout=170,
    )
    assert r.returncode == 5, r.stderr
    repo = open_repository(f"sqlite:///{db}")
    try:
        job = repo.get_job("rec")
    finally:
        repo.close()
    assert job is not None
    assert (job.state, job.exit_code) == ("stopped", 5), job
    assert job.end_reason is not None and job.end_reason.startswith(
        "no progress: 1 consecutive restarts without a higher iteration than 5"
    ), job.end_reason


def test_progress_every_cycle_is_not_ended(tmp_path: Path) -> None:
    r = run_relaunch(
        tmp_path,
        _args(
            tmp_path, "adv", "advance", "--max-restarts", "3", "--ft-max-no-progress-restarts", "1"
        ),
    )
    assert r.returncode == 1, r.stderr  # the restart budget, not the guard
    assert len(cycle_logs(tmp_path, "adv")) == 4
    assert "ended by the launcher" not in r.stderr
    assert "restart budget (3) spent" in r.stderr
    for cycle in (1, 2, 3):
        log = read_log(tmp_path, "adv", cycle)
        assert f"progress guard: cycle {cycle - 1} made progress" in log


def test_workers_without_the_client_are_not_ended(tmp_path: Path) -> None:
    r = run_relaunch(
        tmp_path,
        _args(
            tmp_path,
            "silent",
            "silent",
            "--max-restarts",
            "3",
            "--ft-max-no-progress-restarts",
            "1",
        ),
    )
    assert r.returncode == 1, r.stderr
    assert len(cycle_logs(tmp_path, "silent")) == 4
    assert "progress guard" not in r.stderr
    assert not re.search(r"progress guard", read_log(tmp_path, "silent", 3))


def test_guard_off_with_nvrx_zero(tmp_path: Path) -> None:
    r = run_relaunch(
        tmp_path,
        _args(tmp_path, "off", "stuck", "--max-restarts", "3", "--ft-max-no-progress-cycles", "0"),
    )
    assert r.returncode == 1, r.stderr
    assert len(cycle_logs(tmp_path, "off")) == 4
    assert "made no progress" in r.stderr  # counted and shown, never acted on
    assert "(limit off)" in r.stderr


def test_min_progress_iterations(tmp_path: Path) -> None:
    """+10 per cycle is not progress when 11 are required."""
    r = run_relaunch(
        tmp_path,
        _args(
            tmp_path,
            "minit",
            "advance",
            "--max-restarts",
            "5",
            "--ft-max-no-progress-restarts",
            "2",
            "--ft-min-progress-iterations",
            "11",
        ),
    )
    assert r.returncode == 5, r.stderr
    assert len(cycle_logs(tmp_path, "minit")) == 3
    assert "progress needs 21" in r.stderr


def test_bad_values_are_one_line_errors(tmp_path: Path) -> None:
    for flag, value, why in (
        ("--ft-min-progress-iterations", "0", "must be >= 1"),
        ("--ft-safety-factor", "0.5", "must be between 1 and 1000"),
        ("--ft-rank-out-of-section-timeout", "-1", "must be >= 0"),
    ):
        r = run_relaunch(tmp_path, _args(tmp_path, "bad", "stuck", flag, value))
        assert r.returncode == 2, (flag, r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and why in lines[0], (flag, r.stderr)
        assert not (tmp_path / "logs" / "bad").exists() or not cycle_logs(tmp_path, "bad")


def test_two_nodes_end_together_when_only_rank_0_reports(tmp_path: Path) -> None:
    """Two launchers on loopback (one worker each); only node 0's rank reports progress.
    Node 1 learns the job's best through the rendezvous store, so both count the same
    restarts and both end the job at the same cycle boundary."""
    args = ["--max-restarts", "10", "--ft-max-no-progress-restarts", "2"]
    args += ["--workers-stop-timeout", "3", str(WORKER), "--mode", "rank0_reports"]
    codes, errs = run_two_nodes(tmp_path, "pg2", args, timeout=300)
    assert codes == [5, 5], errs
    for err in errs:
        assert "no progress: 2 consecutive restarts without a higher iteration than 5" in err
    judged: dict[str, list[tuple]] = {}
    for name in cycle_logs(tmp_path, "pg2"):
        node = name.split(".")[1]
        text = (tmp_path / "logs" / "pg2" / name).read_text()
        judged.setdefault(node, []).extend(
            (f["cycle"], f["progressed"], f["best"], f["count"])
            for f in facts_of(text, "progress_guard")
        )
    assert judged["node0"] == judged["node1"], judged
    assert judged["node0"] == [(0, True, 5, 0), (1, False, 5, 1), (2, False, 5, 2)], judged
