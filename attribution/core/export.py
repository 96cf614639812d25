"""Webhook export: POST each completed verdict as JSON to a configured URL.

`WebhookExporter` is an engine listener. `__call__` only enqueues (never blocks the
analysis); one background thread delivers with retries and exponential backoff. The
queue is bounded: when it is full the oldest undelivered verdict is dropped and counted.
"""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from relaunch.attribution.core.background import BackgroundQueue

if TYPE_CHECKING:
    from relaunch.attribution.core.engine import VerdictEvent


log = logging.getLogger(__name__)

EXPORT_SCHEMA = "relaunch.verdict-export/1"
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


def event_payload(event: VerdictEvent) -> dict[str, Any]:
    """The JSON body sent for one verdict event (schema `relaunch.verdict-export/1`).

    `audit_path` is null: the event names the audit folder, and the artifact is written by
    another listener, maybe after this one (the field stays for the schema)."""
    verdict = event.verdict.to_dict()
    return {
        "schema": EXPORT_SCHEMA,
        "job_id": event.job_id,
        "cycle": event.cycle,
        "log_path": str(event.log_path),
        "decision": str(event.verdict.decision),
        "verdict": verdict,
        "audit_path": None,
    }


@dataclass
class ExportStats:
    enqueued: int = 0
    delivered: int = 0
    dropped: int = 0  # queue full: oldest dropped
    failed: int = 0  # gave up after all retries or on a non-retryable status
    attempts: int = 0


class WebhookExporter:
    """Deliver verdicts to `url` in the background; an engine listener."""

    def __init__(
        self,
        url: str,
        *,
        queue_size: int = 1000,
        max_attempts: int = 6,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        timeout_s: float = 5.0,
        headers: dict[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"webhook URL must be http:// or https://: {url!r}")
        self.url = url
        self.max_attempts = max(1, max_attempts)
        self.backoff_base_s, self.backoff_max_s = backoff_base_s, backoff_max_s
        self.stats = ExportStats()
        self._stop = threading.Event()
        self._client = httpx.Client(
            timeout=timeout_s,
            headers={"content-type": "application/json", **(headers or {})},
            transport=transport,
        )
        self._queue: BackgroundQueue[dict[str, Any]] = BackgroundQueue(
            self._deliver, name="relaunch-webhook", maxsize=max(1, queue_size), drop_oldest=True
        )

    # --- listener side: never blocks -------------------------------------------------
    def __call__(self, event: VerdictEvent) -> None:
        self.submit(event_payload(event))

    def submit(self, payload: dict[str, Any]) -> None:
        dropped = self._queue.dropped
        if self._queue.put(payload):
            self.stats.enqueued += 1
        if self._queue.dropped != dropped:
            self.stats.dropped += 1
            log.warning("webhook queue full: dropped the oldest verdict")

    def _backoff(self, attempt: int, retry_after: str | None) -> float:
        if retry_after is not None:
            try:
                return min(self.backoff_max_s, max(0.0, float(retry_after)))
            except ValueError:
                pass
        base = min(self.backoff_max_s, self.backoff_base_s * (2 ** (attempt - 1)))
        return base * (0.5 + random.random() / 2)

    def _deliver(self, payload: dict[str, Any]) -> None:
        for attempt in range(1, self.max_attempts + 1):
            self.stats.attempts += 1
            retry_after = None
            try:
                resp = self._client.post(self.url, json=payload)
                if resp.status_code < 300:
                    self.stats.delivered += 1
                    return
                if resp.status_code not in RETRY_STATUSES:
                    log.warning("webhook answered %s: not retried", resp.status_code)
                    self.stats.failed += 1
                    return
                retry_after = resp.headers.get("retry-after")
                reason = f"HTTP {resp.status_code}"
            except httpx.HTTPError as exc:
                reason = type(exc).__name__
            if attempt == self.max_attempts:
                break
            delay = self._backoff(attempt, retry_after)
            log.info("webhook delivery failed (%s); retry %d in %.2fs", reason, attempt, delay)
            if self._stop.wait(delay):
                break
        self.stats.failed += 1
        log.warning(
            "webhook delivery of job %s cycle %s failed",
            payload.get("job_id"),
            payload.get("cycle"),
        )

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until the queue is empty (True) or `timeout_s` passed (False)."""
        return self._queue.drain(timeout_s)

    def close(self, timeout_s: float = 5.0) -> None:
        """Deliver what is queued within `timeout_s`, then stop the thread."""
        self.flush(timeout_s)
        self._stop.set()
        self._queue.close(1.0)
        self._client.close()
