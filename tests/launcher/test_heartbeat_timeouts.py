"""Out-of-section and calculated timeouts through real `relaunch run` processes.

The hung workers block forever (an Event nobody sets): whether a hang is declared depends
only on the timeout, never on how fast the machine is.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests._launcher_helpers import REPO, cycle_logs, facts_of, job_args, read_log, run_relaunch

WORKER = REPO / "tests" / "workers" / "progress_job.py"


def _args(tmp_path: Path, job: str, mode: str, *extra: str) -> list[str]:
    return job_args(
        tmp_path,
        job,
        "--nproc-per-node",
        "1",
        "--ft-attribution-endpoint",
        "off",
        "--workers-stop-timeout",
        "2",
        "--ft-heartbeat-timeout",
        "3600",
        "--ft-initial-heartbeat-timeout",
        "3600",
        *extra,
        str(WORKER),
        "--mode",
        mode,
    )


def test_out_of_section_hang_is_detected(tmp_path: Path) -> None:
    """A rank that heart-beats from a thread but is stuck between sections is hung."""
    r = run_relaunch(
        tmp_path,
        _args(
            tmp_path,
            "oos",
            "out_of_section",
            "--max-restarts",
            "0",
            "--ft-rank-out-of-section-timeout",
            "5",  # room for the worker's start before its first section
        ),
        timeout=170,
    )
    assert r.returncode == 1, r.stderr
    log0 = read_log(tmp_path, "oos", 0)
    m = re.search(
        r"\[relaunch\] hang detected: rank 0 outside any section for ([\d.]+) s "
        r"\(out-of-section timeout 5 s\)",
        log0,
    )
    assert m, log0[-2000:]
    hang = facts_of(log0, "hang")
    assert len(hang) == 1 and hang[0]["rank"] == 0 and hang[0]["section"] is None
    assert hang[0]["silent_s"] >= 5.0  # declared only past the timeout (no upper bound: load)
    assert "[rank0]: now blocking outside any section" in log0


def test_calculated_timeouts_are_logged_applied_and_reused(tmp_path: Path) -> None:
    """Cycle 0 is observed (heartbeats 0.3 s apart); cycle 1 blocks inside a section and is
    declared hung by the calculated heartbeat timeout (the explicit one is an hour). A
    re-run of the job id starts with the stored values."""
    args = _args(
        tmp_path,
        "calc",
        "calibrate_then_hang",
        "--max-restarts",
        "1",
        "--ft-calculate-timeouts",
        "--ft-safety-factor",
        "4",
    )
    r = run_relaunch(tmp_path, args, timeout=170)
    assert r.returncode == 1, r.stderr
    m = re.search(
        r"relaunch: timeouts calculated after cycle 0 \(safety factor 4 x the longest interval "
        r"observed\): heartbeat ([\d.e+-]+) s, initial ([\d.e+-]+) s, section 'step' [\d.e+-]+ s, "
        r"out-of-section [\d.e+-]+ s; used from cycle 1",
        r.stderr,
    )
    assert m, r.stderr
    heartbeat = float(m.group(1))
    assert heartbeat >= 4 * 0.3  # at least 4 x the worker's own 0.3 s pauses
    log0, log1 = read_log(tmp_path, "calc", 0), read_log(tmp_path, "calc", 1)
    (t0,) = facts_of(log0, "timeouts")
    assert (t0["heartbeat"], t0["initial"], t0["calculated"]) == (3600.0, 3600.0, [])
    (t1,) = facts_of(log1, "timeouts")
    assert t1["heartbeat"] == heartbeat and t1["safety_factor"] == 4.0
    assert set(t1["calculated"]) == {"heartbeat", "initial", "out_of_section", "section:step"}
    hang = re.search(
        r"\[relaunch\] hang detected: rank 0 sent no heartbeat for ([\d.]+) s.*"
        r"\(timeout ([\d.e+-]+) s, calculated\)",
        log1,
    )
    assert hang, log1[-2000:]
    assert float(hang.group(2)) in (t1["heartbeat"], t1["initial"])
    (fact,) = facts_of(log1, "hang")
    assert fact["silent_s"] >= float(hang.group(2))  # declared only past the timeout
    state = json.loads((tmp_path / "logs" / "calc" / "calculated_timeouts.json").read_text())
    assert state["calculated"]["heartbeat"] == heartbeat

    again = run_relaunch(tmp_path, args, timeout=170)
    assert again.returncode == 1, again.stderr
    assert "timeouts calculated by an earlier run of this job (calculated_timeouts.json" in (
        again.stderr
    )
    assert cycle_logs(tmp_path, "calc")[-1] == "cycle_3.log"
    log2 = read_log(tmp_path, "calc", 2)  # the re-run's first cycle: stored values at once
    (t2,) = facts_of(log2, "timeouts")
    assert t2["heartbeat"] == heartbeat and "heartbeat" in t2["calculated"]
    assert re.search(r"hang detected: rank 0 sent no heartbeat .*calculated\)", log2), log2


def test_calculation_off_keeps_explicit_values(tmp_path: Path) -> None:
    """Without --ft-calculate-timeouts nothing is calculated, stored or logged."""
    r = run_relaunch(
        tmp_path,
        job_args(
            tmp_path,
            "plain",
            "--nproc-per-node",
            "1",
            "--ft-attribution-endpoint",
            "off",
            "--max-restarts",
            "0",
            str(WORKER),
            "--mode",
            "stuck",
        ),
    )
    assert r.returncode == 1, r.stderr
    assert "timeouts calculated" not in r.stderr
    assert not facts_of(read_log(tmp_path, "plain", 0), "timeouts")
    assert not (tmp_path / "logs" / "plain" / "calculated_timeouts.json").exists()
