"""Slack alerts against a Slack-API-compatible server on 127.0.0.1 (tests/_slack_server.py)."""

from __future__ import annotations

import argparse
import json
import logging
import socket
from typing import Any

import pytest

from relaunch.attribution.core.engine import VerdictEvent
from relaunch.attribution.notify.slack import SlackConfig, SlackNotifier
from relaunch.cli import slack_options
from relaunch.restart_agent.model import (
    Budgets,
    Decision,
    Evidence,
    History,
    Progress,
    Rule,
    Verdict,
)
from tests._slack_server import SlackServer

TOKEN = "xoxb-test-token"


def verdict(
    decision: str = "STOP",
    *,
    text: str = "SyntaxError: invalid syntax",
    fingerprint: str = "python_syntax_error:invalid syntax",
    same_root: int = 0,
) -> dict[str, Any]:
    return {
        "decision": decision,
        "basis": "A SyntaxError in the user's code cannot heal by restarting.",
        "rule": "workload.certain_stop" if decision == "STOP" else "default.restart",
        "primary": {
            "failure_class": "python_syntax_error",
            "line": 42,
            "rank": 3,
            "fingerprint": fingerprint,
            "text": text,
        },
        "cascades": [],
        "progress": {"known": False, "last_iteration": None},
        "history": {"same_root_prior_cycles": same_root},
        "budgets": {},
    }


def event(job_id: str, cycle: int) -> VerdictEvent:
    """What the engine hands the listener: a typed STOP `Verdict` with `verdict()`'s content."""
    d = verdict()
    typed = Verdict(
        decision=Decision.STOP,
        basis=d["basis"],
        rule=Rule.STOP_CERTAIN_WORKLOAD_BUG,
        primary=Evidence(
            line=42,
            rank=3,
            pattern_id="python.syntax_error",
            failure_class="python_syntax_error",
            domain="workload",
            role="root",
            recoverability="stop",
            text=d["primary"]["text"],
            fingerprint=d["primary"]["fingerprint"],
        ),
        cascades=[],
        progress=Progress(),
        history=History.from_dict(d["history"]),
        budgets=Budgets.from_dict({}),
    )
    return VerdictEvent(
        job_id=job_id, cycle=cycle, log_path="/l/c.log", verdict=typed, log_identity={}
    )


def notifier(server: SlackServer, **kw: Any) -> SlackNotifier:
    return notifier_at(server.base_url, **kw)


def notifier_at(base_url: str, **kw: Any) -> SlackNotifier:
    cfg = dict(
        token=TOKEN,
        channel="#alerts",
        base_url=base_url,
        backoff_s=0.05,
        min_post_interval_s=0.0,
    )
    cfg.update(kw)
    return SlackNotifier(SlackConfig(**cfg))


def all_text(message: dict[str, Any]) -> str:
    return json.dumps(message["blocks"]) + message["text"]


def mrkdwn_texts(node: Any) -> list[str]:
    """Every string Slack parses as mrkdwn (plain_text objects are shown verbatim)."""
    if isinstance(node, list):
        return [t for item in node for t in mrkdwn_texts(item)]
    if isinstance(node, dict):
        if node.get("type") == "mrkdwn":
            return [node["text"]]
        return [t for v in node.values() for t in mrkdwn_texts(v)]
    return []


def test_stop_posts_a_block_kit_message_with_job_cycle_verdict_cause_evidence_link() -> None:
    with SlackServer(TOKEN) as server:
        n = notifier(server, dashboard_url="http://dash.example:8000/")
        n(event("job-7", 2))
        assert n.flush(10)
        n.close()
        [msg] = server.wait_for(1)
        req = server.requests[0]
    assert req["path"] == "/api/chat.postMessage"
    assert req["auth"] == f"Bearer {TOKEN}"
    assert msg["channel"] == "#alerts"
    types = [b["type"] for b in msg["blocks"]]
    assert types[0] == "header" and "actions" in types
    assert "STOP" in msg["blocks"][0]["text"]["text"]
    fields = " ".join(f["text"] for f in msg["blocks"][1]["fields"])
    assert "job-7" in fields and "*Cycle*\n2" in fields and "STOP" in fields
    body = all_text(msg)
    assert "cannot heal by restarting" in body  # one-line cause
    assert "SyntaxError: invalid syntax" in body and "line 42, rank 3" in body  # evidence
    button = next(b for b in msg["blocks"] if b["type"] == "actions")["elements"][0]
    assert button["url"] == "http://dash.example:8000/jobs/job-7/cycles/2"
    assert msg["text"].startswith("relaunch STOP job job-7 cycle 2")


def test_restart_is_silent_by_default_and_posted_with_failure_trigger() -> None:
    with SlackServer(TOKEN) as server:
        quiet = notifier(server)
        assert quiet.notify("j", 1, verdict("RESTART")) is None
        quiet.close()
        loud = notifier(server, on=frozenset({"failure"}))
        assert loud.notify("j", 1, verdict("RESTART")) == "failure"
        loud.close()
        msgs = server.wait_for(1)
    assert len(msgs) == 1
    assert "Failed cycle in job j" in msgs[0]["blocks"][0]["text"]["text"]


def test_recurring_fingerprint_alerts_once_per_fingerprint() -> None:
    with SlackServer(TOKEN) as server:
        n = notifier(server, on=frozenset({"recurring"}))
        assert (
            n.notify("j", 1, verdict("RESTART", same_root=0)) is None
        )  # first time: not recurring
        assert n.notify("j", 2, verdict("RESTART", same_root=1)) == "recurring"
        assert n.notify("j", 3, verdict("RESTART", same_root=2)) is None  # already announced
        other = verdict("RESTART", fingerprint="cuda_oom:x", same_root=1)
        assert n.notify("j", 4, other) == "recurring"
        n.close()
        msgs = server.wait_for(2)
    assert len(msgs) == 2
    assert "Recurring failure" in msgs[0]["blocks"][0]["text"]["text"]
    assert "1 prior cycle(s)" in all_text(msgs[0])


def test_same_cycle_verdict_is_deduplicated_per_job() -> None:
    with SlackServer(TOKEN) as server:
        n = notifier(server)
        assert n.notify("a", 5, verdict()) == "stop"
        assert n.notify("a", 5, verdict()) is None  # same job, same cycle: deduplicated
        assert n.notify("b", 5, verdict()) == "stop"  # another job is not
        n.close()
        msgs = server.wait_for(2)
    assert sorted(m["blocks"][1]["fields"][0]["text"] for m in msgs) == ["*Job*\na", "*Job*\nb"]


def test_dedup_kept_in_the_database_survives_a_restart(tmp_path: Any) -> None:
    """Two notifiers over one SQLite history, one after the other (a service restart):
    the second sends neither the same cycle's STOP nor the same recurrence again."""
    from relaunch.storage import open_repository

    repo = open_repository(f"sqlite:///{tmp_path / 'h.db'}")
    with SlackServer(TOKEN) as server:
        first = notifier(server, on=frozenset({"stop", "recurring"}))
        first.use_store(repo.alert_recorded, repo.record_alert)
        assert first.notify("a", 5, verdict()) == "stop"
        assert first.notify("a", 6, verdict("RESTART", same_root=1)) == "recurring"
        first.close()
        assert len(server.wait_for(2)) == 2
        second = notifier(server, on=frozenset({"stop", "recurring"}))
        second.use_store(repo.alert_recorded, repo.record_alert)
        second.notify("a", 5, verdict())  # sent before the restart: skipped by the worker
        second.notify("a", 7, verdict("RESTART", same_root=2))  # recurrence announced before
        assert second.notify("a", 8, verdict()) == "stop"  # a new cycle still alerts
        assert second.flush(10)
        second.close()
        msgs = server.wait_for(3)
    assert len(msgs) == 3
    assert "cycle 8" in msgs[2]["text"]
    assert repo.alert_recorded("a", "slack:cycle:8:STOP")
    repo.close()


def test_an_alert_that_was_never_delivered_is_not_recorded(tmp_path: Any) -> None:
    """Slack is down: the STOP is given up, so a restarted service still sends it."""
    from relaunch.storage import open_repository
    from tests._web_helpers import free_port

    repo = open_repository(f"sqlite:///{tmp_path / 'h.db'}")
    down = notifier_at(f"http://127.0.0.1:{free_port()}/api/", max_attempts=1)
    down.use_store(repo.alert_recorded, repo.record_alert)
    assert down.notify("a", 5, verdict()) == "stop"
    assert down.flush(20)
    down.close()
    assert down.failed == 1 and not repo.alert_recorded("a", "slack:cycle:5:STOP")
    with SlackServer(TOKEN) as server:
        up = notifier(server)
        up.use_store(repo.alert_recorded, repo.record_alert)
        assert up.notify("a", 5, verdict()) == "stop"
        up.close()
        assert len(server.wait_for(1)) == 1
    assert repo.alert_recorded("a", "slack:cycle:5:STOP")
    repo.close()


def test_a_failing_dedup_store_never_loses_a_stop(caplog: pytest.LogCaptureFixture) -> None:
    def broken(job_id: str, key: str) -> bool:
        raise RuntimeError("database is gone")

    with SlackServer(TOKEN) as server:
        n = notifier(server)
        n.use_store(broken, broken)
        with caplog.at_level(logging.ERROR, logger="relaunch.attribution.notify.slack"):
            assert n.notify("a", 1, verdict()) == "stop"
        n.close()
        assert len(server.wait_for(1)) == 1
    assert "dedup store failed; sending anyway" in caplog.text
    assert "could not record a sent alert" in caplog.text


def test_rate_limit_per_job_suppresses_failures_but_never_stop() -> None:
    with SlackServer(TOKEN) as server:
        n = notifier(server, on=frozenset({"failure"}), per_job_burst=2, per_job_window_s=3600)
        kinds = [n.notify("j", c, verdict("RESTART")) for c in range(1, 6)]
        assert kinds == ["failure", "failure", None, None, None]
        assert n.notify("other", 1, verdict("RESTART")) == "failure"  # limit is per job
        assert n.notify("j", 6, verdict("STOP")) == "stop"
        n.close()
        msgs = server.wait_for(4)
    assert len(msgs) == 4
    stop = next(m for m in msgs if "STOP" in m["blocks"][0]["text"]["text"])
    assert "3 earlier alert(s) for this job were rate limited" in all_text(stop)


def test_429_retry_after_and_ok_false_are_retried_until_delivered() -> None:
    with SlackServer(TOKEN) as server:
        server.script(["429:1", "error:internal_error", "503"])
        n = notifier(server)
        n.notify("j", 1, verdict())
        assert n.flush(20)
        n.close()
        reqs = server.wait_for(4, requests=True)
    assert [r["answer"] for r in reqs] == ["429:1", "error:internal_error", "503", "ok"]
    assert reqs[1]["time"] - reqs[0]["time"] >= 0.9  # honoured Retry-After: 1
    assert len(server.messages) == 1 and n.sent == 1 and n.failed == 0


def test_gives_up_after_max_attempts_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    with SlackServer(TOKEN) as server:
        server.script(["500"] * 10)
        n = notifier(server, max_attempts=3)
        with caplog.at_level(logging.WARNING, logger="relaunch.attribution.notify.slack"):
            n.notify("j", 1, verdict())
            assert n.flush(10)
        n.close()
        assert len(server.requests) == 3 and not server.messages
    assert n.failed == 1
    assert "gave up on a stop alert for job j" in caplog.text


def test_bad_token_is_not_retried() -> None:
    with SlackServer("xoxb-the-right-one") as server:
        n = notifier(server)  # sends TOKEN, which the server rejects
        n.notify("j", 1, verdict())
        assert n.flush(10)
        n.close()
        assert len(server.requests) == 1 and not server.messages
    assert n.failed == 1


def test_listener_never_blocks_on_a_slow_slack() -> None:
    with SlackServer(TOKEN) as server:
        server.script(["sleep:1.5"])
        n = notifier(server)
        n(event("j", 1))
        # The call returned while Slack is still answering: the worker holds the message.
        assert n.flush(0) is False
        assert n.flush(10) is True
        n.close()
        assert len(server.messages) == 1


def test_unreachable_slack_never_raises_into_the_caller() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = SlackConfig(
        token=TOKEN, channel="#c", base_url=f"http://127.0.0.1:{port}/api/", max_attempts=2
    )
    n = SlackNotifier(cfg)
    cfg.backoff_s = 0.01
    n(event("j", 1))
    n("not an event")  # type: ignore[arg-type]  # malformed events are logged, not raised
    assert n.flush(10)
    n.close()
    assert n.failed == 1 and n.sent == 0


def test_untrusted_log_text_cannot_ping_or_forge_links() -> None:
    evil = "boom <!channel> <http://evil.example|click me> & `rm -rf` " + "x" * 2000
    with SlackServer(TOKEN) as server:
        n = notifier(server)
        n.notify("j<!here>", 1, verdict(text=evil))
        n.close()
        [msg] = server.wait_for(1)
    parsed = " ".join(mrkdwn_texts(msg["blocks"])) + msg["text"]  # what Slack interprets
    assert "<!channel>" not in parsed and "<!here>" not in parsed and "<http://evil" not in parsed
    assert "&lt;!channel&gt;" in parsed and "&amp;" in parsed and "j&lt;!here&gt;" in parsed
    evidence = next(b for b in msg["blocks"] if "Evidence" in b.get("text", {}).get("text", ""))
    assert len(evidence["text"]["text"]) < 800  # long lines are clipped


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    slack_options.add_arguments(parser)
    return parser.parse_args(argv)


def test_flags_token_file_env_and_errors(tmp_path: Any) -> None:
    assert slack_options.config_from_args(_parse([]), environ={}) is None  # not configured: off
    tok = tmp_path / "token"
    tok.write_text("xoxb-from-file\n")
    cfg = slack_options.config_from_args(
        _parse(
            [
                "--slack-token-file",
                str(tok),
                "--slack-channel",
                "#ops",
                "--slack-on",
                "failure",
                "--dashboard-url",
                "http://d:1",
            ]
        ),
        environ={"SLACK_BOT_TOKEN": "xoxb-env"},
    )
    assert cfg is not None
    assert cfg.token == "xoxb-from-file" and cfg.channel == "#ops"
    assert cfg.on == {"stop", "failure"} and cfg.dashboard_url == "http://d:1"
    env_cfg = slack_options.config_from_args(
        _parse(["--slack-channel", "#ops"]), environ={"SLACK_BOT_TOKEN": "xoxb-env"}
    )
    assert env_cfg is not None and env_cfg.token == "xoxb-env" and env_cfg.on == {"stop"}

    with pytest.raises(ValueError, match="needs a token"):
        slack_options.config_from_args(_parse(["--slack-channel", "#ops"]), environ={})
    with pytest.raises(ValueError, match="cannot read --slack-token-file"):
        slack_options.config_from_args(
            _parse(["--slack-channel", "#c", "--slack-token-file", str(tmp_path / "nope")]), {}
        )
    (tmp_path / "empty").write_text("  \n")
    with pytest.raises(ValueError, match="is empty"):
        slack_options.config_from_args(
            _parse(["--slack-channel", "#c", "--slack-token-file", str(tmp_path / "empty")]), {}
        )
    with pytest.raises(ValueError, match="need --slack-channel"):
        slack_options.config_from_args(_parse(["--slack-on", "failure"]), {})
    with pytest.raises(SystemExit):
        _parse(["--slack-on", "sometimes"])


def test_from_args_raises_user_error_for_the_cli() -> None:
    from relaunch.cli.errors import UserError

    with pytest.raises(UserError, match="needs a token"):
        slack_options.from_args(_parse(["--slack-channel", "#ops"]), environ={})


def test_posts_are_spaced_to_respect_slacks_per_channel_limit() -> None:
    with SlackServer(TOKEN) as server:
        n = notifier(server, min_post_interval_s=0.4)
        for job in ("a", "b", "c"):
            n.notify(job, 1, verdict())
        assert n.flush(10)
        n.close()
        times = [r["time"] for r in server.requests]
    assert len(times) == 3
    assert all(b - a >= 0.35 for a, b in zip(times, times[1:], strict=False))
