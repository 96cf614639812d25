"""`launcher.outcome`: the exit codes and the rules that turn one into the job's end.

Pure functions, so every rule is checked directly here; the launcher tests
(tests/launcher/test_launcher.py, tests/launcher/test_progress_guard_launcher.py, ...) check the same codes
end to end on real workers.
"""

from __future__ import annotations

import signal

from relaunch.launcher.attribution_client import VerdictInfo
from relaunch.launcher.outcome import ExitCode, JobOutcome, final_state, signal_code
from relaunch.restart_agent.model import JobState

STOP = VerdictInfo(2, "STOP", "same failure twice", None, "embedded")


def _record(out: JobOutcome, **kw: object) -> tuple[JobState, int, str] | None:
    args: dict[str, object] = dict(
        max_restarts=3, max_nodes=1, stop=None, no_progress_reason=None, unhealthy_reason=None
    )
    args.update(kw)
    return out.record(**args)  # type: ignore[arg-type]


def test_exit_codes_are_the_documented_numbers() -> None:
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4, 5, 6]
    assert signal_code(signal.SIGINT) == 130 and signal_code(signal.SIGTERM) == 143


def test_final_state_per_code() -> None:
    assert final_state(0, 3, None) == (JobState.SUCCEEDED, "all ranks exited with code 0")
    assert final_state(1, 3, None) == (JobState.FAILED, "restart budget (3) spent")
    assert final_state(3, 3, STOP)[0] == JobState.STOPPED
    assert "cycle 2: same failure twice" in final_state(3, 3, STOP)[1]
    assert final_state(3, 3, None)[0] == JobState.FAILED  # no verdict to cite
    assert final_state(4, 3, None)[0] == JobState.FAILED
    assert final_state(5, 3, None)[0] == JobState.STOPPED
    assert final_state(6, 3, None)[0] == JobState.FAILED
    assert final_state(130, 3, None) == (
        JobState.INTERRUPTED,
        "the launcher received SIGINT; workers stopped",
    )
    assert final_state(128 + 250, 3, None)[1].startswith("the launcher received signal 250")


def test_a_stop_verdict_turns_failures_but_not_signals_into_exit_3() -> None:
    failed = JobOutcome(int(ExitCode.FAILED))
    assert failed.apply_stop(STOP) and failed.code == 3
    assert not JobOutcome(int(ExitCode.FAILED)).apply_stop(None)
    ok, sig = JobOutcome(0), JobOutcome(signal_code(signal.SIGTERM))
    assert not ok.apply_stop(STOP) and ok.code == 0
    assert not sig.apply_stop(STOP) and sig.code == 143 and sig.interrupted


def test_the_state_of_a_cycle_still_open_at_the_end() -> None:
    assert JobOutcome(0).cycle_end_state(True) == JobState.SUCCEEDED
    assert JobOutcome(130).cycle_end_state(True) == JobState.INTERRUPTED
    assert JobOutcome(1).cycle_end_state(True) == JobState.STOPPED
    assert JobOutcome(1).cycle_end_state(False) == JobState.FAILED


def test_a_node_that_does_not_end_the_job_records_nothing() -> None:
    assert _record(JobOutcome(0, note="closed by another node")) is None
    assert _record(JobOutcome(int(ExitCode.NODE_UNHEALTHY)), max_nodes=2) is None
    single = _record(JobOutcome(int(ExitCode.NODE_UNHEALTHY)), unhealthy_reason="gpu: xid 79")
    assert single is not None and single[:2] == (JobState.FAILED, 4)
    assert single[2].endswith(": gpu: xid 79")
    guard = _record(JobOutcome(int(ExitCode.NO_PROGRESS)), no_progress_reason="no progress: 3")
    assert guard == (JobState.STOPPED, 5, "no progress: 3")
    rec = _record(JobOutcome(int(ExitCode.OK)))
    assert rec is not None and type(rec[1]) is int  # a plain int goes to the history
