"""One chat-completion call through the `openai` SDK, under a hard deadline, with retries.

The SDK's own retries are off (`max_retries=0`): this module owns the loop so that the
whole call, waits included, ends by the deadline. Retried: HTTP 5xx, 429 (honouring
`Retry-After` / `retry-after-ms` when the wait fits before the deadline), 408/409 and
connection errors. A server that rejects `response_format: json_schema` (HTTP 400/422)
is asked again at once with `json_object`. Every attempt's timeout is the time left.

Error strings are built from status codes and exception types, and any text taken from
the server is passed through `redact()` so that the API key never leaves this module.
"""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass, field
from typing import Any

import openai

from relaunch.restart_agent.llm.schema import response_format_json_schema

_BACKOFF_S = (0.25, 0.5, 1.0, 2.0)
_MAX_SERVER_TEXT = 200


class CallFailed(Exception):
    """The call did not produce an answer. `str()` is safe to log and store."""

    def __init__(self, kind: str, message: str, attempts: int) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind  # timeout | rate_limited | http_error | connection | auth | bad_request
        self.attempts = attempts


@dataclass
class CallResult:
    content: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    response_format: str  # "json_schema" or "json_object"
    attempts: int
    model: str | None = None  # the model name the server reports
    notes: list[str] = field(default_factory=list)  # retries and fallbacks, redacted


def redact(text: str, secret: str | None) -> str:
    """`text` with `secret` (and its non-trivial halves) replaced by ***."""
    if not secret or len(secret) < 4:
        return text
    out = text.replace(secret, "***")
    if len(secret) >= 16:  # servers often echo a key partly: 'sk-abc...xyz'
        half = len(secret) // 2
        out = out.replace(secret[:half], "***").replace(secret[half:], "***")
    return out


def _retry_after(exc: openai.APIStatusError) -> float | None:
    headers = exc.response.headers
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _server_text(exc: openai.APIStatusError, key: str) -> str:
    body = exc.body
    message = None
    if isinstance(body, dict):
        err = body.get("error", body)
        message = err.get("message") if isinstance(err, dict) else str(err)
    if message is None:
        message = str(body) if body is not None else ""
    message = " ".join(str(message).split())[:_MAX_SERVER_TEXT]
    return redact(message, key)


def _rejects_schema(exc: openai.APIStatusError) -> bool:
    return exc.status_code in (400, 422)


def call(
    *,
    base_url: str,
    api_key: str,
    model: str,
    messages: list[dict[str, str]],
    max_tokens: int,
    temperature: float,
    deadline: float,
    max_retries: int,
) -> CallResult:
    """Ask once (plus retries) and return the answer text; raise CallFailed otherwise.

    `deadline` is a `time.monotonic()` instant.
    """
    client = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=5.0)
    fmt: dict[str, Any] = response_format_json_schema()
    fmt_name = "json_schema"
    notes: list[str] = []
    attempts = retries = 0
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0.05:
                raise CallFailed("timeout", "deadline reached before an answer", attempts)
            attempts += 1
            try:
                # messages and response_format are plain dicts of the shapes openai's
                # TypedDict overloads describe; the SDK sends them as they are.
                resp = client.chat.completions.create(  # type: ignore[call-overload]
                    model=model,
                    messages=messages,
                    response_format=fmt,
                    max_tokens=max_tokens,
                    temperature=temperature,
                    timeout=left,
                )
            except openai.APITimeoutError:
                raise CallFailed("timeout", "no answer before the deadline", attempts) from None
            except openai.APIStatusError as exc:
                status = exc.status_code
                text = _server_text(exc, api_key)
                if fmt_name == "json_schema" and _rejects_schema(exc):
                    notes.append(f"HTTP {status} for json_schema; retried with json_object")
                    fmt, fmt_name = {"type": "json_object"}, "json_object"
                    continue
                if status in (401, 403):
                    raise CallFailed("auth", f"HTTP {status}: {text}", attempts) from None
                retryable = status == 429 or status >= 500 or status in (408, 409)
                if not retryable:
                    raise CallFailed("bad_request", f"HTTP {status}: {text}", attempts) from None
                kind = "rate_limited" if status == 429 else "http_error"
                if retries >= max_retries:
                    raise CallFailed(
                        kind, f"HTTP {status} after {attempts} attempts: {text}", attempts
                    ) from None
                wait = _retry_after(exc) if status == 429 else None
                if wait is None:
                    wait = _BACKOFF_S[min(retries, len(_BACKOFF_S) - 1)]
                if time.monotonic() + wait >= deadline:
                    raise CallFailed(
                        "timeout" if status != 429 else "rate_limited",
                        f"HTTP {status}; the retry wait of {wait:.1f}s passes the deadline",
                        attempts,
                    ) from None
                notes.append(f"HTTP {status}; retry in {wait:.2f}s")
                retries += 1
                time.sleep(wait)
                continue
            except openai.APIConnectionError as exc:
                if retries >= max_retries:
                    raise CallFailed(
                        "connection", f"{type(exc).__name__} after {attempts} attempts", attempts
                    ) from None
                wait = _BACKOFF_S[min(retries, len(_BACKOFF_S) - 1)]
                if time.monotonic() + wait >= deadline:
                    raise CallFailed(
                        "connection", f"{type(exc).__name__}; no time left to retry", attempts
                    ) from None
                notes.append(f"{type(exc).__name__}; retry in {wait:.2f}s")
                retries += 1
                time.sleep(wait)
                continue
            choice = resp.choices[0] if resp.choices else None
            usage = resp.usage
            return CallResult(
                content=choice.message.content if choice else None,
                prompt_tokens=usage.prompt_tokens if usage else None,
                completion_tokens=usage.completion_tokens if usage else None,
                response_format=fmt_name,
                attempts=attempts,
                model=resp.model,
                notes=notes,
            )
    finally:
        client.close()
