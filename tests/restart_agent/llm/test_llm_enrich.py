"""LLM enrichment against a real OpenAI-compatible server on 127.0.0.1, via the openai SDK."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from relaunch.restart_agent.llm import LLMConfig, LLMConfigError, enrich, enrich_and_apply
from relaunch.restart_agent.llm.prompt import Budget, estimate_tokens
from tests._llm_helpers import (
    KEY,
    PRIMARY_TEXT,
    answer,
    config,
    make_verdict,
    write_log,
)
from tests._llm_server import LLMServer


def test_grounded_answer_is_recorded_with_tokens_latency_and_citations(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    log, line = write_log(tmp_path)
    model = llm_server.script([{"content": answer(line)}])
    out = enrich(make_verdict(line), log, config(llm_server, model, key_file))
    assert out["status"] == "ok", out["error"]
    assert out["grounded"] is True
    assert out["claims"] == {"explanation": True, "owner": True, "recovery_outlook": True}
    assert out["response_format"] == "json_schema"
    assert out["tokens"]["prompt"] > 0 and out["tokens"]["completion"] > 0
    assert out["latency_ms"] > 0
    cite = out["answer"]["owner"]["citations"][0]
    assert cite == {
        "line": line,
        "quote": "is not divisible by num_attention_heads",
        "shown": True,
        "grounded": True,
    }
    # what the server received: the bearer key, a json_schema response format, the window
    (req,) = llm_server.requests(model)
    assert req["authorization"] == f"Bearer {KEY}"
    assert req["body"]["response_format"]["type"] == "json_schema"
    user = req["body"]["messages"][1]["content"]
    assert f"{line}| [rank0]: {PRIMARY_TEXT}" in user
    # the bounded view: verdict summary with folded cascades, progress and history
    summary = json.loads(user.split("\n")[1])
    assert summary["primary"]["line"] == line and summary["rule"] == "restart.workload_first"
    assert summary["cascades"] == [
        {
            "class": "nccl_watchdog_timeout",
            "role": "cascade",
            "count": 40,
            "ranks": "1-3",
            "first_line": line + 1,
            "example": "[E ProcessGroupNCCL.cpp:1234] Watchdog caught collective operation timeout",
        }
    ]
    assert summary["progress"]["last_iteration"] == 38
    assert summary["history"]["same_root_prior_cycles"] == 0
    assert "1| [rank0]: iteration 1 |" not in user  # 150 lines before the primary: cut at 60


def test_invented_line_numbers_are_ungrounded(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    log, line = write_log(tmp_path)
    model = llm_server.script([{"content": answer(99_999)}])
    out = enrich(make_verdict(line), log, config(llm_server, model, key_file))
    assert out["status"] == "ok"
    assert out["grounded"] is False
    cite = out["answer"]["owner"]["citations"][0]
    assert cite["grounded"] is False and cite["reason"] == "line does not exist in the log"


def test_quote_not_on_the_cited_line_is_ungrounded(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    log, line = write_log(tmp_path)
    # a real line, but the quote is from another one
    model = llm_server.script([{"content": answer(line - 3, "is not divisible")}])
    out = enrich(make_verdict(line), log, config(llm_server, model, key_file))
    assert out["grounded"] is False
    assert out["answer"]["owner"]["citations"][0]["reason"] == "quote is not in that line"


def test_one_ungrounded_claim_makes_the_answer_ungrounded(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    log, line = write_log(tmp_path)
    model = llm_server.script([{"content": answer(line, explanation_line=5000)}])
    out = enrich(make_verdict(line), log, config(llm_server, model, key_file))
    assert out["claims"] == {"explanation": False, "owner": True, "recovery_outlook": True}
    assert out["grounded"] is False


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ('{"explanation": {"text": "x", "citations": [', "malformed: answer is not JSON"),
        ("", "malformed: empty answer"),
        (
            json.dumps({**json.loads(answer(3)), "explanation": "plain"}),
            "malformed: $.explanation: expected an object",
        ),
        (
            answer(3).replace('"will_not_recover"', '"maybe"'),
            "malformed: $.recovery_outlook.value: 'maybe' is not one of",
        ),
        (
            json.dumps({**json.loads(answer(3)), "decision": "STOP"}),
            "malformed: $: unexpected keys ['decision']",
        ),
    ],
    ids=["truncated-json", "empty", "wrong-type", "bad-enum", "extra-key"],
)
def test_malformed_answers_are_errors_not_enrichments(
    llm_server: LLMServer, key_file: Path, tmp_path: Path, content: str, error: str
) -> None:
    log, line = write_log(tmp_path)
    model = llm_server.script([{"content": content}])
    verdict = make_verdict(line)
    out = enrich(verdict, log, config(llm_server, model, key_file))
    assert out["status"] == "error"
    assert out["error"].startswith(error)
    assert out["grounded"] is False and out["answer"] is None
    applied = enrich_and_apply(verdict, log, config(llm_server, model, key_file))
    assert applied["decision"] == "RESTART" and applied["llm"]["contributed"] is False


def test_code_fenced_json_is_accepted(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    log, line = write_log(tmp_path)
    model = llm_server.script([{"content": "```json\n" + answer(line) + "\n```"}])
    out = enrich(make_verdict(line), log, config(llm_server, model, key_file))
    assert out["status"] == "ok" and out["grounded"] is True


def test_slow_server_hits_the_hard_timeout(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    log, line = write_log(tmp_path)
    model = llm_server.script([{"content": answer(line), "delay": 5}])
    started = time.monotonic()
    out = enrich(make_verdict(line), log, config(llm_server, model, key_file, timeout_s=1.0))
    waited = time.monotonic() - started
    assert out["status"] == "error" and out["error"].startswith("timeout")
    assert out["late"] is True
    assert waited < 4, "the deadline must cut the call, not the server's delay"


def test_500_then_ok_is_retried(llm_server: LLMServer, key_file: Path, tmp_path: Path) -> None:
    log, line = write_log(tmp_path)
    model = llm_server.script([{"status": 500}, {"status": 503}, {"content": answer(line)}])
    out = enrich(make_verdict(line), log, config(llm_server, model, key_file))
    assert out["status"] == "ok" and out["grounded"] is True
    assert out["attempts"] == 3
    assert out["notes"][0].startswith("HTTP 500; retry in")
    assert len(llm_server.requests(model)) == 3


def test_500_forever_gives_up_after_the_retry_budget(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    log, line = write_log(tmp_path)
    model = llm_server.script([{"status": 500}])
    out = enrich(make_verdict(line), log, config(llm_server, model, key_file, max_retries=2))
    assert out["status"] == "error"
    assert out["error"].startswith("http_error: HTTP 500 after 3 attempts")
    assert len(llm_server.requests(model)) == 3


def test_429_waits_for_retry_after_then_succeeds(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    log, line = write_log(tmp_path)
    model = llm_server.script(
        [{"status": 429, "headers": {"Retry-After": "1"}}, {"content": answer(line)}]
    )
    out = enrich(make_verdict(line), log, config(llm_server, model, key_file))
    assert out["status"] == "ok" and out["attempts"] == 2
    first, second = llm_server.requests(model)
    assert second["t"] - first["t"] >= 0.95, "Retry-After: 1 was not honoured"


def test_429_whose_retry_after_passes_the_deadline_fails_at_once(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    log, line = write_log(tmp_path)
    model = llm_server.script(
        [{"status": 429, "headers": {"Retry-After": "30"}}, {"content": answer(line)}]
    )
    out = enrich(make_verdict(line), log, config(llm_server, model, key_file, timeout_s=2.0))
    assert out["status"] == "error"
    assert out["error"].startswith(
        "rate_limited: HTTP 429; the retry wait of 30.0s passes the deadline"
    )
    assert len(llm_server.requests(model)) == 1


def test_server_without_json_schema_falls_back_to_json_object(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    log, line = write_log(tmp_path)
    model = llm_server.script([{"content": answer(line)}], reject_json_schema=True)
    out = enrich(make_verdict(line), log, config(llm_server, model, key_file))
    assert out["status"] == "ok" and out["response_format"] == "json_object"
    formats = [r["body"]["response_format"]["type"] for r in llm_server.requests(model)]
    assert formats == ["json_schema", "json_object"]


def test_missing_key_file_is_an_error_without_any_request(
    llm_server: LLMServer, tmp_path: Path
) -> None:
    log, line = write_log(tmp_path)
    model = llm_server.script([{"content": answer(line)}])
    missing = tmp_path / "nope.key"
    cfg = LLMConfig(base_url=llm_server.base_url, model=model, api_key_file=str(missing))
    with pytest.raises(LLMConfigError, match="LLM API key file not found: .*nope.key"):
        cfg.check_key_file()
    out = enrich(make_verdict(line), log, cfg)
    assert out["status"] == "error"
    assert out["error"] == f"config: LLM API key file not found: {missing}"
    assert llm_server.requests(model) == []


def test_empty_key_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty.key").write_text("\n  \n")
    cfg = LLMConfig(
        base_url="http://127.0.0.1:9/v1", model="m", api_key_file=str(tmp_path / "empty.key")
    )
    with pytest.raises(LLMConfigError, match="LLM API key file is empty"):
        cfg.load_api_key()


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"base_url": "ftp://x/v1"}, "LLM base URL must be http"),
        ({"base_url": "127.0.0.1:8000"}, "LLM base URL must be http"),
        ({"model": " "}, "LLM model name is empty"),
        ({"timeout_s": 0}, "LLM timeout must be > 0"),
        ({"context_tokens": 100}, "LLM context size must be >= 1024"),
    ],
)
def test_bad_config_values_get_clear_errors(kw: dict, message: str) -> None:
    args = {"base_url": "http://127.0.0.1:9/v1", "model": "m", **kw}
    with pytest.raises(LLMConfigError, match=message):
        LLMConfig(**args)


def test_unreachable_server_is_a_connection_error(key_file: Path, tmp_path: Path) -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    log, line = write_log(tmp_path)
    cfg = LLMConfig(
        base_url=f"http://127.0.0.1:{port}/v1", model="m", api_key_file=str(key_file), max_retries=1
    )
    out = enrich(make_verdict(line), log, cfg)
    assert out["status"] == "error" and out["error"].startswith("connection: APIConnectionError")


def test_key_never_leaks_into_records_errors_logs_or_reprs(
    llm_server: LLMServer,
    key_file: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, the SDK's and httpx's included
    log, line = write_log(tmp_path)
    verdict = make_verdict(line)
    records = []
    # a server that echoes the key in its error bodies, in 500s, 401s and even in an answer
    for steps in (
        [{"status": 500, "echo_key": True}],
        [{"status": 401, "echo_key": True}],
        [{"status": 400, "echo_key": True}],
        [{"status": 429, "echo_key": True, "headers": {"Retry-After": "30"}}],
        [{"content": answer(line).replace("The model config", KEY)}],
    ):
        model = llm_server.script(steps)
        cfg = config(llm_server, model, key_file, max_retries=1, timeout_s=3)
        records.append(enrich_and_apply(verdict, log, cfg))
        assert KEY not in repr(cfg) and KEY not in str(cfg.describe())
    # the servers really did see (and echo) the key
    assert llm_server.requests(model)[0]["authorization"] == f"Bearer {KEY}"
    errors = [r["llm"]["error"] for r in records]
    assert errors[0].startswith("http_error: HTTP 500") and "***" in errors[0]
    assert errors[1].startswith("auth: HTTP 401") and "***" in errors[1]
    assert errors[2].startswith("bad_request: HTTP 400") and "***" in errors[2]
    assert errors[3].startswith("rate_limited: HTTP 429")
    assert "***" in (records[4]["llm"]["explanation"] or "")
    captured = capsys.readouterr()
    everything = json.dumps(records) + caplog.text + captured.out + captured.err
    assert "LLM enrichment failed" in caplog.text  # the failures were logged ...
    assert KEY not in everything  # ... without the key
    assert KEY[:20] not in everything and KEY[-20:] not in everything


def test_prompt_is_bounded_by_the_token_budget_and_never_the_whole_log(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    # 200k lines (~12 MB) before the failure; lines of 2 kB after it
    log, line = write_log(tmp_path, before=200_000, after=50)
    with log.open("a") as f:
        for i in range(50):
            f.write(f"[rank3]: teardown {i} " + "x" * 2000 + "\n")
    model = llm_server.script([{"content": answer(line)}])
    for context in (1024, 8192):
        cfg = config(llm_server, model, key_file, context_tokens=context)
        out = enrich(make_verdict(line), log, cfg)
        assert out["status"] == "ok" and out["grounded"] is True
        budget = Budget.from_context(context)
        assert out["prompt"]["estimated_tokens"] <= budget.prompt_tokens
        lo, hi = out["prompt"]["window"]
        assert lo <= line <= hi
    requests = llm_server.requests(model)
    small, large = (r["body"] for r in requests)
    for body, context in ((small, 1024), (large, 8192)):
        text = "".join(m["content"] for m in body["messages"])
        assert estimate_tokens(text) <= Budget.from_context(context).prompt_tokens
        assert body["max_tokens"] == Budget.from_context(context).output_tokens
        assert f"[rank0]: {PRIMARY_TEXT}" in text  # the primary is never cut
        assert "iteration 1 |" not in text  # the start of the log is not there
    assert len(small["messages"][1]["content"]) < len(large["messages"][1]["content"])


def test_log_without_primary_gets_a_tail_window(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    log, line = write_log(tmp_path, before=500, after=10)
    verdict = make_verdict(line)
    verdict["primary"] = None
    model = llm_server.script([{"content": answer(line)}])
    out = enrich(verdict, log, config(llm_server, model, key_file))
    lo, hi = out["prompt"]["window"]
    assert hi == line + 10  # the last line of the log
    assert out["grounded"] is True


def test_binary_and_missing_logs_do_not_crash(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    log = tmp_path / "binary.log"
    log.write_bytes(
        b"\x00\xff\xfe garbage\n" * 50 + b"\xc3\x28 ValueError: bad \xe2\x82\n" + b"\x00" * 70000
    )
    model = llm_server.script([{"content": answer(51, "ValueError: bad")}])
    out = enrich(make_verdict(51), log, config(llm_server, model, key_file))
    assert out["status"] == "ok" and out["grounded"] is True
    gone = enrich(make_verdict(51), tmp_path / "gone.log", config(llm_server, model, key_file))
    assert gone["status"] == "error" and gone["error"].startswith("log: cannot read")


def test_a_log_that_blocks_is_cut_by_the_deadline_too(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    import os

    fifo = tmp_path / "stuck.log"
    os.mkfifo(fifo)  # opening it for reading blocks until a writer comes
    model = llm_server.script([{"content": answer(1)}])
    out = enrich(make_verdict(1), fifo, config(llm_server, model, key_file, timeout_s=0.5))
    assert out["status"] == "error" and out["error"] == "timeout: no answer within 0.5s"
    assert out["late"] is True and llm_server.requests(model) == []
    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # release the abandoned worker
    os.close(fd)
