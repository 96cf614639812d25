"""The optional Slack straggler alert, against the loopback Slack-compatible server."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from relaunch.attribution.core.engine import VerdictEvent
from relaunch.cli import slack_options
from relaunch.restart_agent.model import Verdict
from tests._slack_server import SlackServer
from tests.attribution.notify.test_slack import TOKEN, notifier

STRAGGLERS = {
    "named": [
        {
            "rank": 5,
            "node": "node1",
            "section": "fwd",
            "relative": 0.3,
            "individual": 0.4,
            "threshold": 0.7,
            "reports": 2,
        },
    ],
    "persistent": [5],
    "scores": [
        {
            "node": "node1",
            "threshold": 0.7,
            "reports": 7,
            "ranks": {"5": {"relative": 0.3, "below": 3}, "1": {"relative": 1.0, "below": 0}},
        }
    ],
    "suspect_rank": 5,
    "min_reports": 2,
}


def restart(**extra: Any) -> dict[str, Any]:
    return {
        "decision": "RESTART",
        "rule": "restart.cascade_only",
        "basis": "b",
        "primary": {
            "line": 7,
            "rank": 5,
            "pattern_id": "nccl.watchdog_timeout",
            "failure_class": "nccl_watchdog_timeout",
            "domain": "infrastructure",
            "role": "cascade",
            "recoverability": "restart",
            "text": "[Rank 5] Watchdog caught collective operation timeout",
            "fingerprint": "f00d",
        },
        "cascades": [],
        "progress": {"known": False, "last_iteration": None},
        "history": {},
        "budgets": {},
        **extra,
    }


def event(job_id: str, cycle: int, verdict: dict[str, Any]) -> VerdictEvent:
    """What the engine hands the listener: the typed `Verdict` of this JSON."""
    return VerdictEvent(
        job_id=job_id,
        cycle=cycle,
        log_path="/l/c.log",
        verdict=Verdict.from_dict(verdict),
        log_identity={},
    )


def test_straggler_alert_is_off_by_default() -> None:
    with SlackServer(TOKEN) as server:
        n = notifier(server)
        n(event("j", 1, restart(stragglers=STRAGGLERS)))
        # the listener does work: a STOP after it is posted, and it is the only message
        n(event("j", 2, {**restart(), "decision": "STOP"}))
        assert n.flush(10)
        n.close()
        [msg] = server.wait_for(1)
        assert len(server.requests) == 1
    assert msg["text"].startswith("relaunch STOP")


def test_straggler_alert_names_the_slow_rank_once_when_it_stayed_slow_for_n_reports() -> None:
    with SlackServer(TOKEN) as server:
        n = notifier(server, straggler_reports=3, dashboard_url="http://dash:8000")
        n(event("j", 1, restart(stragglers=STRAGGLERS)))
        n(event("j", 1, restart(stragglers=STRAGGLERS)))  # dedup
        n(event("j", 2, restart()))  # no scores: nothing
        assert n.flush(10)
        n.close()
        [msg] = server.wait_for(1)
        assert len(server.requests) == 1
    assert msg["text"].startswith("relaunch straggler job j cycle 1: rank(s) 5 slow")
    body = str(msg["blocks"])
    assert "rank 5 on node node1" in body and "3 reports in a row" in body
    assert "relative 0.3" in body and "suspect of the timeout" in body
    assert "http://dash:8000/jobs/j/cycles/1" in body


def test_a_rank_slow_for_fewer_reports_is_not_alerted_and_stop_still_is() -> None:
    with SlackServer(TOKEN) as server:
        n = notifier(server, straggler_reports=4)
        n(event("j", 1, {**restart(stragglers=STRAGGLERS), "decision": "STOP"}))
        assert n.flush(10)
        n.close()
        [msg] = server.wait_for(1)
    assert msg["text"].startswith("relaunch STOP")


def test_bad_straggler_flags_are_one_line_errors() -> None:
    parser = argparse.ArgumentParser()
    slack_options.add_arguments(parser)
    args = parser.parse_args(["--slack-straggler-reports", "3"])
    with pytest.raises(ValueError, match="need --slack-channel"):
        slack_options.config_from_args(args, {})
    args = parser.parse_args(["--slack-channel", "#a", "--slack-straggler-reports", "0"])
    with pytest.raises(ValueError, match="must be >= 1"):
        slack_options.config_from_args(args, {"SLACK_BOT_TOKEN": "x"})
    args = parser.parse_args(["--slack-channel", "#a", "--slack-straggler-reports", "2"])
    cfg = slack_options.config_from_args(args, {"SLACK_BOT_TOKEN": "x"})
    assert cfg is not None and cfg.straggler_reports == 2
