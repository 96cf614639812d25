"""The dashboard's one-line exit cause for cycles the launcher ended, and which job states
stop the live poll."""

from __future__ import annotations

from relaunch.web.views import TERMINAL_STATES, exit_cause


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


def test_dates_before_year_one_in_utc_and_interrupted_filter(tmp_path) -> None:
    """`since=0001-01-01T00:00+01:00` is before year 1 in UTC: 400, not a 500; the state
    filter knows `interrupted` (a state the launcher records)."""
    from relaunch.storage import open_repository
    from tests._web_helpers import DashboardServer, http_get

    repo = open_repository(f"sqlite:///{tmp_path / 'w.db'}")
    with DashboardServer(repo) as srv:
        for q in ("since=0001-01-01T00:00%2B01:00", "until=9999-12-31T23:59:59-01:00"):
            r = http_get(f"{srv.base_url}/?{q}")
            assert r.status_code == 400 and "out of range" in r.text, (q, r.status_code)
        assert http_get(f"{srv.base_url}/?state=interrupted").status_code == 200
        assert http_get(f"{srv.base_url}/?state=bogus").status_code == 400
