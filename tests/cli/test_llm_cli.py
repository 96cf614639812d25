"""The `--ft-llm-*` / `--llm` flags, and `relaunch analyze --llm` as a real subprocess."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from relaunch.cli import llm_options
from relaunch.cli.errors import UserError
from relaunch.restart_agent.llm import LLMConfig
from tests._llm_helpers import KEY, answer, write_log
from tests._llm_server import LLMServer

REPO = Path(__file__).resolve().parents[2]


def parse(argv: list[str], prog: str = "relaunch run", **kw: bool) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, exit_on_error=False)
    llm_options.add_arguments(p, **kw)
    return p.parse_args(argv)


def test_off_unless_configured() -> None:
    assert llm_options.config_from_args(parse([])) is None
    assert llm_options.config_from_args(parse([], prog="relaunch analyze")) is None
    # analyze: configured flags without --llm stay off
    args = parse(
        ["--ft-llm-base-url", "http://127.0.0.1:9/v1", "--ft-llm-model", "m"],
        prog="relaunch analyze",
    )
    assert llm_options.config_from_args(args) is None


def test_full_configuration(key_file: Path) -> None:
    args = parse(
        [
            "--ft-llm-base-url",
            "http://127.0.0.1:9/v1",
            "--ft-llm-model",
            "m",
            "--ft-llm-api-key-file",
            str(key_file),
            "--ft-llm-timeout",
            "7.5",
            "--ft-llm-context-tokens",
            "32768",
        ]
    )
    cfg = llm_options.config_from_args(args)
    assert cfg == LLMConfig("http://127.0.0.1:9/v1", "m", str(key_file), 7.5, 32768)
    assert KEY not in repr(cfg)


def test_defaults_and_the_llm_switch_only_on_analyze() -> None:
    args = parse(["--ft-llm-base-url", "http://h:1/v1", "--ft-llm-model", "m"])
    assert (args.ft_llm_timeout, args.ft_llm_context_tokens) == (60.0, 8192)
    assert not hasattr(args, "llm")
    assert parse(["--llm"], prog="relaunch analyze").llm is True
    assert parse(["--llm"], prog="x", analyze=True).llm is True
    with pytest.raises((argparse.ArgumentError, SystemExit)):
        parse(["--llm"], prog="relaunch serve")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--ft-llm-base-url", "http://h:1/v1"], "--ft-llm-base-url needs --ft-llm-model NAME"),
        (["--ft-llm-model", "m"], "need --ft-llm-base-url URL"),
        (
            ["--ft-llm-base-url", "localhost:8000", "--ft-llm-model", "m"],
            "LLM base URL must be http",
        ),
        (
            [
                "--ft-llm-base-url",
                "http://h:1/v1",
                "--ft-llm-model",
                "m",
                "--ft-llm-api-key-file",
                "/nonexistent/k",
            ],
            "LLM API key file not found: /nonexistent/k",
        ),
    ],
)
def test_half_configurations_are_user_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        llm_options.config_from_args(parse(argv))


def test_llm_switch_without_url_is_a_user_error() -> None:
    with pytest.raises(
        UserError, match="--llm needs --ft-llm-base-url URL and --ft-llm-model NAME"
    ):
        llm_options.config_from_args(parse(["--llm"], prog="relaunch analyze"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--ft-llm-timeout", "0"], "must be a positive number of seconds"),
        (["--ft-llm-timeout", "soon"], "expected seconds"),
        (["--ft-llm-timeout", "nan"], "must be a positive number of seconds"),
        (["--ft-llm-context-tokens", "512"], "must be at least 1024 tokens"),
        (["--ft-llm-context-tokens", "8k"], "expected a number of tokens"),
    ],
)
def test_bad_flag_values_are_argparse_errors(argv: list[str], message: str) -> None:
    with pytest.raises(argparse.ArgumentError, match=message):
        parse(argv)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("OPENAI_API_KEY", None)
    return subprocess.run(
        [sys.executable, "-m", "relaunch.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _analyze_available() -> None:
    try:
        from relaunch import restart_agent

        restart_agent.LogScanner  # noqa: B018
    except (ImportError, AttributeError):
        pytest.skip("restart_agent.LogScanner (issue 2) is not in the tree yet")


def test_analyze_with_a_missing_key_file_is_a_one_line_error(tmp_path: Path) -> None:
    log, _ = write_log(tmp_path)
    r = _cli(
        "analyze",
        str(log),
        "--llm",
        "--ft-llm-base-url",
        "http://127.0.0.1:9/v1",
        "--ft-llm-model",
        "m",
        "--ft-llm-api-key-file",
        str(tmp_path / "missing.key"),
    )
    assert r.returncode == 2
    assert (
        r.stderr.strip()
        == f"relaunch analyze: error: LLM API key file not found: {tmp_path / 'missing.key'}"
    )
    assert r.stdout == ""


def test_analyze_llm_prints_the_enrichment_and_never_the_key(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    _analyze_available()
    log, line = write_log(tmp_path)
    model = llm_server.script([{"content": answer(line)}])
    flags = [
        "--llm",
        "--ft-llm-base-url",
        llm_server.base_url,
        "--ft-llm-model",
        model,
        "--ft-llm-api-key-file",
        str(key_file),
    ]
    r = _cli("analyze", str(log), "--format", "json", *flags)
    assert r.returncode == 0, r.stderr
    verdict = json.loads(r.stdout)
    llm = verdict["llm"]
    assert llm["model"] == model and llm["status"] == "ok" and llm["grounded"] is True
    assert llm["tokens"]["prompt"] > 0 and llm["latency_ms"] > 0
    assert llm["citations"]["owner"][0]["line"] == line
    # the deterministic policy restarts a first ValueError once; the grounded answer shortens it
    assert llm["contributed"] is True
    assert llm["deterministic"]["decision"] == "RESTART"
    assert llm["deterministic"]["rule"] == "restart.workload_first"
    assert (verdict["decision"], verdict["rule"]) == ("STOP", "llm_grounded_workload_bug")
    (req,) = llm_server.requests(model)
    assert req["authorization"] == f"Bearer {KEY}"
    assert KEY not in r.stdout + r.stderr
    # for people: the enrichment with its citations follows the verdict
    r = _cli("analyze", str(log), *flags)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("STOP")
    assert "grounded=yes, contributed=yes" in r.stdout
    assert f"cite owner: line {line} 'is not divisible by num_attention_heads' [ok]" in r.stdout
    # a failing server: the deterministic verdict is still printed, exit 0, no key
    bad = llm_server.script([{"status": 401, "echo_key": True}])
    flags[flags.index(model)] = bad
    r = _cli("analyze", str(log), "--format", "json", *flags)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["decision"], out["rule"]) == ("RESTART", "restart.workload_first")
    assert out["llm"]["contributed"] is False and out["llm"]["error"].startswith("auth: HTTP 401")
    assert KEY not in r.stdout + r.stderr
