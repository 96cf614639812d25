"""The dashboard's one-line exit cause for cycles the launcher ended, and which job states
stop the live poll."""

from __future__ import annotations

from web.views import TERMINAL_STATES, exit_cause


def test_a_cycle_that_ended_without_analysis_says_how_it_ended() -> None:
    assert exit_cause({"status": "ended", "outcome": "succeeded"}) == "succeeded"
    assert (
        exit_cause({"status": "ended", "outcome": "interrupted", "end_reason": "SIGINT"})
        == "interrupted: SIGINT"
    )


def test_a_failed_analysis_says_why_and_a_verdict_wins() -> None:
    assert exit_cause({"status": "failed", "analysis_error": "log gone"}) == (
        "analysis failed: log gone"
    )
    analysed = {"status": "analyzed", "outcome": "failed", "failure_class": "nccl_error"}
    assert exit_cause(analysed) == "nccl_error"
    assert exit_cause({"status": "analyzed"}) == "no failure evidence"


def test_interrupted_jobs_are_not_polled_live() -> None:
    assert {"succeeded", "failed", "stopped", "interrupted"} <= TERMINAL_STATES
    assert "running" not in TERMINAL_STATES
