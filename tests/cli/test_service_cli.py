"""`relaunch serve` flag errors: one line on stderr, exit 2, nothing started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._service_helpers import REPO_ROOT, cli_env


def serve(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relaunch.cli", "serve", *args],
        cwd=str(REPO_ROOT),
        env=cli_env({"RELAUNCH_HOME": str(home)}),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--allowed-root", "/proc/version/dir"], "--allowed-root is not a directory"),
        (["--token-file", "/nonexistent/token"], "cannot read --token-file"),
        (["--webhook-url", "ftp://x/y"], "--webhook-url must be http"),
        (["--db", "notaurl"], "not a database URL"),
        (["--port", "70000"], "argument --port: must be between 0 and 65535"),
        (["--workers", "0"], "argument --workers: must be between 1 and 1024"),
        (["--poll-interval", "0"], "argument --poll-interval: must be between 0.01 and 3600"),
        (["--analysis-timeout", "0"], "--analysis-timeout must be between"),
        (["--analysis-timeout", "nan"], "--analysis-timeout must be between"),
    ],
)
def test_bad_flags_get_one_line(tmp_path: Path, args: list[str], needle: str):
    proc = serve(*args, home=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("relaunch serve: error: ") and needle in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_empty_token_file(tmp_path: Path):
    tok = tmp_path / "tok"
    tok.write_text("\n")
    proc = serve("--token-file", str(tok), home=tmp_path)
    assert proc.returncode == 2 and "is empty" in proc.stderr


def test_token_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path):
    fifo = tmp_path / "tok"
    os.mkfifo(fifo)  # no writer: reading it by name would block forever
    proc = serve("--token-file", str(fifo), home=tmp_path)
    assert proc.returncode == 2 and "is not a regular file" in proc.stderr


def test_uds_path_that_is_not_a_socket(tmp_path: Path):
    f = tmp_path / "plain"
    f.write_text("x")
    proc = serve("--uds", str(f), home=tmp_path)
    assert proc.returncode == 2 and "not a socket" in proc.stderr
    assert f.read_text() == "x"  # left alone


def test_help_lists_the_flags(tmp_path: Path):
    out = serve("--help", home=tmp_path).stdout
    for flag in (
        "--host",
        "--port",
        "--uds",
        "--db",
        "--allowed-root",
        "--token-file",
        "--audit-dir",
        "--webhook-url",
        "--ft-llm-base-url",
        "--slack-channel",
    ):
        assert flag in out, flag


def test_dashboard_url_defaults_to_the_services_own_address():
    """Slack alerts link the dashboard even without --dashboard-url."""
    from relaunch.cli.serve_cmd import build_parser, default_dashboard_url, settings_from_args

    p = build_parser("relaunch serve")
    assert default_dashboard_url(p.parse_args([])) == "http://127.0.0.1:8570"
    assert default_dashboard_url(p.parse_args(["--host", "::1", "--port", "9"])) == (
        "http://[::1]:9"
    )
    for no_url in (["--uds", "/tmp/x.sock"], ["--port", "0"], ["--no-dashboard"]):
        assert default_dashboard_url(p.parse_args(no_url)) is None
    args = p.parse_args(["--port", "8123"])
    settings_from_args(args)
    assert args.dashboard_url == "http://127.0.0.1:8123"
    args = p.parse_args(["--dashboard-url", "https://dash.example"])
    settings_from_args(args)
    assert args.dashboard_url == "https://dash.example"
