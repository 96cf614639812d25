"""Slack alerts from the real `relaunch serve` (flags --slack-*) to a loopback Slack server."""

from __future__ import annotations

import pytest

from tests._service_helpers import running_service
from tests._slack_server import SlackServer
from tests._web_helpers import write_job_logs

pytestmark = pytest.mark.slow
TOKEN = "xoxb-service-test"


def upload(svc, job: str, cycle: int, data: bytes) -> dict:
    with svc.client(timeout=60) as c:
        r = c.post(
            f"/v1/jobs/{job}/cycles/{cycle}/log",
            content=data,
            headers={"Content-Type": "application/octet-stream"},
        )
    assert r.status_code == 200, r.text
    return r.json()["verdict"]


def test_stop_verdict_from_the_service_reaches_slack(tmp_path) -> None:
    logs = write_job_logs(tmp_path / "gen")
    token_file = tmp_path / "slack-token"
    token_file.write_text(TOKEN + "\n")
    with SlackServer(TOKEN) as slack:
        args = ["--slack-token-file", str(token_file), "--slack-channel", "#train-alerts"]
        args += ["--slack-on", "recurring", "--dashboard-url", "http://dash.example:8000"]
        args += ["--slack-base-url", slack.base_url]
        with running_service(tmp_path, extra_args=args) as svc:
            verdicts = [upload(svc, "job-s", n, p.read_bytes()) for n, p in enumerate(logs)]
            msgs = slack.wait_for(2, timeout=30)
    assert verdicts[-1]["decision"] == "STOP"
    assert all(m["channel"] == "#train-alerts" for m in msgs)
    headers = [m["blocks"][0]["text"]["text"] for m in msgs]
    # cycle 1 repeats cycle 0's fingerprint (recurring), cycle 2 is the STOP.
    assert headers == ["Recurring failure in job job-s", "STOP: job job-s will not be restarted"]
    stop = msgs[1]
    button = next(b for b in stop["blocks"] if b["type"] == "actions")["elements"][0]
    assert button["url"] == "http://dash.example:8000/jobs/job-s/cycles/2"
    assert "SyntaxError" in str(stop["blocks"])


def test_a_restarted_service_does_not_alert_the_same_stop_again(tmp_path) -> None:
    """The STOP of cycle 2 is alerted; the service restarts on the same database and cycle
    2 is analysed again (the same log uploaded again): no second message. A new cycle's
    STOP alerts. (A grown log for the decided cycle is refused since issue 26: history is
    append-only.)"""
    logs = write_job_logs(tmp_path / "gen")
    stop_log = logs[2].read_bytes()
    db = f"sqlite:///{tmp_path / 'shared.db'}"
    with SlackServer(TOKEN) as slack:
        args = ["--slack-channel", "#c", "--slack-base-url", slack.base_url]
        env = {"SLACK_BOT_TOKEN": TOKEN}
        with running_service(tmp_path, extra_args=args, env=env, db_url=db, name="a") as svc:
            assert upload(svc, "job-r", 2, stop_log)["decision"] == "STOP"
            assert len(slack.wait_for(1, timeout=30)) == 1
        with running_service(tmp_path, extra_args=args, env=env, db_url=db, name="b") as svc:
            with svc.client() as c:
                grown = c.post(
                    "/v1/jobs/job-r/cycles/2/log",
                    content=stop_log + b"[relaunch] late line\n",
                    headers={"Content-Type": "application/octet-stream"},
                )
            assert grown.status_code == 409, grown.text
            again = upload(svc, "job-r", 2, stop_log)
            assert again["decision"] == "STOP" and again["scan"]["lines"] > 0
            assert upload(svc, "job-r", 3, stop_log)["decision"] == "STOP"
            msgs = slack.wait_for(2, timeout=30)
    cycles = [m["blocks"][1]["fields"][1]["text"] for m in msgs]
    assert len(msgs) == 2 and cycles[0] != cycles[1], cycles


def test_unreachable_slack_never_breaks_analysis(tmp_path) -> None:
    from tests._web_helpers import free_port

    logs = write_job_logs(tmp_path / "gen")
    args = ["--slack-channel", "#c", "--slack-base-url", f"http://127.0.0.1:{free_port()}/api/"]
    with running_service(tmp_path, extra_args=args, env={"SLACK_BOT_TOKEN": TOKEN}) as svc:
        verdict = upload(svc, "job-u", 0, logs[2].read_bytes())
        with svc.client() as c:
            assert c.get("/healthz").status_code == 200
    assert verdict["decision"] == "STOP"


def test_bad_slack_flags_stop_the_service_with_one_line(tmp_path) -> None:
    import subprocess
    import sys

    from tests._service_helpers import REPO_ROOT, cli_env

    argv = [sys.executable, "-m", "relaunch.cli", "serve", "--db", f"sqlite:///{tmp_path}/x.db"]
    argv += ["--port", "0", "--slack-channel", "#c", "--slack-token-file", str(tmp_path / "no")]
    env = cli_env()
    env.pop("SLACK_BOT_TOKEN", None)
    r = subprocess.run(argv, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "cannot read --slack-token-file" in r.stderr and "Traceback" not in r.stderr
