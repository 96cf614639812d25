"""One enrichment: bounded prompt, hard-deadline call, validation, grounding — as a dict.

`enrich()` never raises for anything the model, the server, the log or the network does:
every failure becomes `{"status": "error", "error": "..."}` so callers can store it as it
is. The work runs in a daemon thread and `enrich()` returns at the deadline whatever the
thread is doing (a stuck socket or a slow disk cannot hold a listener or the CLI).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from relaunch.restart_agent.llm import client, grounding, prompt, schema
from relaunch.restart_agent.llm.config import LLMConfig, LLMConfigError

log = logging.getLogger(__name__)

_GRACE_S = 0.25  # the thread's own deadline is the same; this only covers scheduling


def _base(config: LLMConfig) -> dict[str, Any]:
    return {
        "status": "error",
        "error": None,
        "model": config.model,
        "tokens": {"prompt": None, "completion": None},
        "latency_ms": None,
        "late": False,
        "grounded": False,
        "claims": {},
        "answer": None,
        "response_format": None,
        "attempts": 0,
        "prompt": None,
        "timeout_s": config.timeout_s,
    }


def enrich(
    verdict: dict[str, Any], log_path: str | os.PathLike[str], config: LLMConfig
) -> dict[str, Any]:
    """Ask the model about `verdict` (a `Verdict.to_dict()`); return the enrichment record.

    Everything after reading the key — the log window, the call with its retries, the
    grounding re-read of the log — runs in a worker thread; at the deadline this returns a
    timeout record whatever the worker is doing (its late result is discarded).
    """
    started = time.monotonic()
    deadline = started + config.timeout_s
    try:
        key = config.load_api_key()
    except LLMConfigError as exc:
        return _finish(_base(config), started, None, f"config: {exc}")

    box: dict[str, Any] = {}

    def work() -> None:
        record = _base(config)
        try:
            box["error"] = _pipeline(record, verdict, log_path, config, key, deadline)
        except Exception as exc:  # noqa: BLE001 - the SDK or httpx raising something unforeseen
            box["error"] = f"internal: {type(exc).__name__}: {client.redact(str(exc), key)[:300]}"
        box["record"] = record

    thread = threading.Thread(target=work, name="relaunch-llm-enrich", daemon=True)
    thread.start()
    thread.join(max(0.0, deadline - time.monotonic()) + _GRACE_S)
    if thread.is_alive() or "record" not in box:
        record = _base(config)
        record["late"] = True
        return _finish(record, started, key, f"timeout: no answer within {config.timeout_s:g}s")
    record = box["record"]
    error = box.get("error")
    if error is None and time.monotonic() > deadline + _GRACE_S:
        record["late"] = True
        record["status"] = "error"
        error = f"timeout: answer arrived after {config.timeout_s:g}s"
    return _finish(record, started, key, error)


def _finish(
    record: dict[str, Any], started: float, key: str | None, error: str | None
) -> dict[str, Any]:
    record["latency_ms"] = round((time.monotonic() - started) * 1000, 1)
    if error is not None:
        error = client.redact(error, key) if key else error
        record["status"], record["error"] = "error", error
        log.warning("LLM enrichment failed: %s", error)
    return _redact_all(record, key)


def _pipeline(
    record: dict[str, Any],
    verdict: dict[str, Any],
    log_path: str | os.PathLike[str],
    config: LLMConfig,
    key: str,
    deadline: float,
) -> str | None:
    """Fill `record`; return an error string, or None when the answer was checked."""
    try:
        built = prompt.build(verdict, log_path, config.context_tokens)
    except OSError as exc:
        return f"log: cannot read {os.fspath(log_path)} ({exc.strerror or type(exc).__name__})"
    record["prompt"] = {
        "estimated_tokens": built.estimated_tokens,
        "budget_tokens": built.budget.prompt_tokens,
        "context_tokens": built.budget.context_tokens,
        "window": list(built.window_lines) if built.window_lines else None,
    }
    try:
        result = client.call(
            base_url=config.base_url,
            api_key=key,
            model=config.model,
            messages=built.messages,
            max_tokens=built.budget.output_tokens,
            temperature=config.temperature,
            deadline=deadline,
            max_retries=config.max_retries,
        )
    except client.CallFailed as exc:
        record["attempts"] = exc.attempts
        record["late"] = exc.kind == "timeout"
        return str(exc)
    record["attempts"] = result.attempts
    record["response_format"] = result.response_format
    record["tokens"] = {"prompt": result.prompt_tokens, "completion": result.completion_tokens}
    if result.notes:
        record["notes"] = result.notes
    try:
        answer = schema.parse(result.content)
    except schema.MalformedAnswer as exc:
        return f"malformed: {exc}"
    try:
        checked = grounding.check(answer, log_path, built.shown_lines)
    except OSError as exc:
        return f"log: cannot re-read for grounding ({exc.strerror or type(exc).__name__})"
    record.update(
        status="ok",
        answer=checked["answer"],
        claims=checked["claims"],
        grounded=checked["grounded"],
    )
    return None


def _redact_all(value: Any, key: str | None) -> Any:
    """Remove the key from every string of the record (a hostile server may echo it)."""
    if not key:
        return value
    if isinstance(value, str):
        return client.redact(value, key)
    if isinstance(value, dict):
        return {k: _redact_all(v, key) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_all(v, key) for v in value]
    return value
