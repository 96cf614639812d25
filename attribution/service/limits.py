"""Request limits: body size (413), per-client rate (429 + Retry-After), bearer token (401),
the Host allow-list (421), cross-site writes (403) and the request-body deadline (408)
(the last three: `attribution.service.guards`).

Plain ASGI middleware so that a rejected request costs no routing, parsing or analysis.
Overload (503) is decided where analyses are queued (`attribution.service.state`).
"""

from __future__ import annotations

import hmac
import json
import math
import threading
import time
from collections import OrderedDict
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from relaunch.attribution.service import guards
from relaunch.attribution.service.errors import ERROR_STATUS, ApiError
from relaunch.web.routes import PAGE_PREFIXES, RAW_LOG_PATH

OPEN_PATHS = ("/healthz",)
READ_METHODS = ("GET", "HEAD")


def is_dashboard_read(method: str, path: str) -> bool:
    """True for a GET/HEAD of a dashboard page: `/` or under `web.routes.PAGE_PREFIXES`.

    Read-only pages are open without the token only with `--dashboard-public`; the raw
    cycle-log routes (`web.routes.RAW_LOG_PATH`) are not pages: they always need it.
    """
    if method not in READ_METHODS or RAW_LOG_PATH.match(path):
        return False
    return path == "/" or any(path == p or path.startswith(p + "/") for p in PAGE_PREFIXES)


UPLOAD_SUFFIXES = ("/log", "/fr")  # POST /v1/jobs/{job}/cycles/{cycle}/log|fr


async def _send_error(
    send: Send, code: str, message: str, headers: dict[str, str] | None = None
) -> None:
    body = json.dumps({"error_code": code, "message": message}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": ERROR_STATUS[code], "headers": raw})
    await send({"type": "http.response.body", "body": body})


DRAIN_BYTES = 16 << 20  # read and dropped past a streamed body's limit before the 413


async def _drain(receive: Receive, message: Message) -> None:
    """Read (and drop) the rest of a body that went over its limit, up to DRAIN_BYTES, so
    that the 413 reaches a client still sending instead of a connection reset (a socket
    closed with unread data answers with RST). A longer body is cut off after the 413."""
    dropped = 0
    while message.get("more_body", False) and dropped < DRAIN_BYTES:
        message = await receive()
        if message["type"] != "http.request":
            return
        dropped += len(message.get("body", b""))


class TokenBucket:
    """Per-key token buckets; keeps at most `max_keys` keys (least recently used evicted)."""

    def __init__(self, rate: float, burst: int, max_keys: int = 10_000) -> None:
        self.rate, self.burst, self.max_keys = rate, float(burst), max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: str, now: float | None = None) -> float:
        """Take one token; return 0.0 if allowed, else seconds until a token is available."""
        now = time.monotonic() if now is None else now
        with self._lock:
            tokens, last = self._buckets.pop(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                wait = 0.0
            else:
                self._buckets[key] = (tokens, now)
                wait = (1.0 - tokens) / self.rate if self.rate > 0 else 60.0
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        return wait


class LimitsMiddleware:
    """Auth, rate limit and body-size limit in front of every route."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        rate: float,
        burst: int,
        max_body: int,
        max_upload: int,
        dashboard_public: bool = False,
        allowed_hosts: frozenset[str] | None = None,
        body_timeout: float = guards.BODY_TIMEOUT_S,
    ) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts
        self.body_timeout = body_timeout
        self.token = token.encode() if token else None
        self.dashboard_public = dashboard_public
        self.bucket = TokenBucket(rate, burst) if rate > 0 else None
        self.max_body, self.max_upload = max_body, max_upload

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        headers = {k.decode("latin-1").lower(): v for k, v in scope.get("headers", [])}
        if not guards.host_allowed(headers.get("host"), self.allowed_hosts):
            await _send_error(
                send, "host_not_allowed", "the Host header does not name this service"
            )
            return
        method = scope.get("method", "")
        open_read = self.dashboard_public and is_dashboard_read(method, path)
        token_ok = False
        if self.token is not None and path not in OPEN_PATHS and not open_read:
            auth = headers.get("authorization", b"")
            given = auth[7:].strip() if auth[:7].lower() == b"bearer " else b""
            if not hmac.compare_digest(given, self.token):
                await _send_error(
                    send,
                    "unauthorized",
                    "missing or wrong bearer token",
                    {"WWW-Authenticate": "Bearer"},
                )
                return
            token_ok = True
        refusal = guards.cross_site_refusal(method, headers, token_ok)
        if refusal is not None:
            await _send_error(send, "cross_site_refused", refusal)
            return
        if self.bucket is not None and path not in OPEN_PATHS:
            client: Any = scope.get("client")
            key = client[0] if client else "local"
            wait = self.bucket.take(key)
            if wait > 0:
                await _send_error(
                    send,
                    "rate_limited",
                    "too many requests; retry later",
                    {"Retry-After": str(max(1, math.ceil(wait)))},
                )
                return
        is_upload = scope.get("method") == "POST" and path.endswith(UPLOAD_SUFFIXES)
        limit = self.max_upload if is_upload else self.max_body
        length = headers.get("content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                await _send_error(send, "invalid_parameter", "bad Content-Length header")
                return
            if declared > limit:
                await _send_error(
                    send, "payload_too_large", f"request body over the limit of {limit} bytes"
                )
                return
        received = 0
        started = False

        timed_receive = guards.body_deadline(receive, self.body_timeout)

        async def counting_receive() -> Message:
            nonlocal received
            message = await timed_receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    await _drain(receive, message)
                    raise ApiError(
                        "payload_too_large", f"request body over the limit of {limit} bytes"
                    )
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except ApiError as exc:
            if started:
                raise
            await _send_error(send, exc.error_code, exc.message, exc.headers)
