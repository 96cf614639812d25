"""Guards of `relaunch serve` against browsers, slow clients and log floods (issue 26).

- `host_allowed`: the Host header must name this service (DNS rebinding: a page on
  `evil.example` whose name resolves to 127.0.0.1 sends `Host: evil.example`). Allowed by
  default: the bound address, `localhost` names and the loopback addresses; a wildcard bind
  adds the machine's host names; `--allowed-host` adds more. Else 421 `host_not_allowed`.
- `cross_site_refusal`: a state-changing request (any method but GET/HEAD/OPTIONS) must be
  one a browser cannot send cross-site without a CORS preflight: a verified bearer token,
  or an `X-Relaunch-Client` header, or a Content-Type that is not CORS-safelisted
  (`application/json`, `application/octet-stream`); and a browser's `Sec-Fetch-Site:
  cross-site` or an `Origin` naming another host is refused outright. Else 403
  `cross_site_refused`. NVRx attrsvc clients send JSON and keep working.
- `GuardedH11`: uvicorn's h11 protocol with a deadline for a request's headers (from the
  connection's start, or the end of the previous response); a connection that has not sent
  whole headers by then is closed. `body_deadline` bounds the wait for each piece of a
  request body (408 `request_timeout`).
- `RateLimitedLog`: a logging filter that lets through at most `burst` records of one
  (logger, message) per `window_s` and then one "suppressed N" line, so a descriptor
  exhaustion cannot write a traceback per accept.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import threading
import time
from typing import Any

import h11
from starlette.types import Message, Receive
from uvicorn.protocols.http.h11_impl import H11Protocol

from relaunch.attribution.service.errors import ApiError

LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "127.0.0.1", "::1"})
SAFELISTED_TYPES = frozenset(
    {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data"}
)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CLIENT_HEADER = "x-relaunch-client"
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 60.0


def _host_only(value: str) -> str:
    """`example:8080` -> `example`, `[::1]:80` -> `::1`; lower case."""
    v = value.strip().lower()
    if v.startswith("["):
        end = v.find("]")
        return v[1:end] if end > 0 else v
    if v.count(":") == 1:
        return v.split(":", 1)[0]
    return v


def default_allowed_hosts(bind_host: str | None, extra: list[str] | None = None) -> frozenset[str]:
    """The Host names this service answers to (see the module docstring)."""
    names = set(LOCAL_NAMES)
    if bind_host:
        names.add(_host_only(bind_host) if bind_host.startswith("[") else bind_host.lower())
        try:
            wildcard = ipaddress.ip_address(bind_host.strip("[]")).is_unspecified
        except ValueError:
            wildcard = False
        if wildcard:
            for name in (socket.gethostname(), socket.getfqdn()):
                if name:
                    names.add(name.lower())
    names.update(_host_only(h) for h in extra or [] if h)
    return frozenset(names)


def host_allowed(host_header: bytes | None, allowed: frozenset[str] | None) -> bool:
    """True when the request's Host is one of `allowed` (None: no check). A request
    without a Host header (HTTP/1.0, not a browser) passes."""
    if allowed is None or host_header is None:
        return True
    host = _host_only(host_header.decode("latin-1"))
    if host in allowed or "*" in allowed:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _media_type(value: bytes | None) -> str:
    if not value:
        return ""
    return value.decode("latin-1").split(";", 1)[0].strip().lower()


def cross_site_refusal(method: str, headers: dict[str, bytes], token_ok: bool) -> str | None:
    """Why a state-changing request is refused as possibly cross-site, or None."""
    if method in SAFE_METHODS:
        return None
    if headers.get("sec-fetch-site", b"").lower() == b"cross-site":
        return "cross-site request refused (Sec-Fetch-Site: cross-site)"
    origin = headers.get("origin")
    if origin and origin.lower() != b"null":
        o = origin.decode("latin-1").split("://", 1)[-1]
        if _host_only(o) != _host_only(headers.get("host", b"").decode("latin-1")):
            return f"cross-site request refused (Origin {origin.decode('latin-1')!r})"
    elif origin is not None:
        return "cross-site request refused (Origin null)"
    if token_ok or headers.get(CLIENT_HEADER):
        return None
    ctype = _media_type(headers.get("content-type"))
    if ctype and ctype not in SAFELISTED_TYPES:
        return None
    return (
        "a state-changing request needs Content-Type application/json (or "
        "application/octet-stream for uploads), an X-Relaunch-Client header or the bearer "
        f"token (got Content-Type {ctype or 'none'!r})"
    )


def body_deadline(receive: Receive, timeout_s: float) -> Receive:
    """`receive` with at most `timeout_s` per piece of the request body (408 past it);
    after the body's last piece, waits are not bounded (disconnect listeners)."""
    done = False

    async def guarded() -> Message:
        nonlocal done
        if done:
            return await receive()
        try:
            message = await asyncio.wait_for(receive(), timeout_s)
        except asyncio.TimeoutError:
            raise ApiError(
                "request_timeout", f"request body not received within {timeout_s:g} s"
            ) from None
        if message["type"] != "http.request" or not message.get("more_body", False):
            done = True
        return message

    return guarded


class GuardedH11(H11Protocol):
    """H11Protocol that closes a connection whose request headers are not complete within
    `header_timeout` (class attribute; `relaunch serve --header-timeout`)."""

    header_timeout: float = HEADER_TIMEOUT_S

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._arm_header_deadline()

    def _arm_header_deadline(self) -> None:
        self._hdr_cycle = self.cycle
        self._hdr_timer: asyncio.TimerHandle | None = self.loop.call_later(
            self.header_timeout, self._header_deadline
        )

    def _disarm(self) -> None:
        timer = getattr(self, "_hdr_timer", None)
        if timer is not None:
            timer.cancel()
            self._hdr_timer = None

    def _header_deadline(self) -> None:
        self._hdr_timer = None
        if self.cycle is self._hdr_cycle and not self.transport.is_closing():
            self.transport.close()  # no whole request headers in time

    def handle_events(self) -> None:
        super().handle_events()
        if self.cycle is not getattr(self, "_hdr_cycle", self.cycle):
            self._disarm()  # a request's headers arrived

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.our_state is h11.IDLE:
            self._disarm()
            self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


class RateLimitedLog(logging.Filter):
    """At most `burst` records per (logger, message template) per `window_s`; then one
    line saying how many were suppressed."""

    def __init__(self, burst: int = 5, window_s: float = 60.0) -> None:
        super().__init__()
        self.burst, self.window_s = burst, window_s
        self._seen: dict[tuple[str, str], list[float]] = {}  # key -> [window start, count]
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, str(record.msg)[:200])
        now = time.monotonic()
        with self._lock:
            if len(self._seen) > 1000:
                self._seen.clear()
            start, count = self._seen.get(key, [now, 0.0])
            if now - start > self.window_s:
                if count > self.burst:
                    record.msg = f"{record.msg} (and {int(count - self.burst)} like it suppressed)"
                start, count = now, 0.0
            count += 1
            self._seen[key] = [start, count]
        if count > self.burst:
            return False
        if count == self.burst:
            record.msg = f"{record.msg} (more like it within {self.window_s:g} s are suppressed)"
        return True


def install_log_limits(burst: int = 5, window_s: float = 60.0) -> RateLimitedLog:
    """Put one `RateLimitedLog` on the root handlers and the loggers that flood (asyncio's
    accept errors, uvicorn's)."""
    flt = RateLimitedLog(burst, window_s)
    for name in ("", "asyncio", "uvicorn", "uvicorn.error", "relaunch"):
        logger = logging.getLogger(name)
        logger.addFilter(flt)
        for handler in logger.handlers:
            handler.addFilter(flt)
    return flt
