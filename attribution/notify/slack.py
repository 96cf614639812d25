"""Slack alerts for verdicts: an engine listener that posts Block Kit messages.

`SlackNotifier` is registered with `AttributionEngine.add_listener` when `relaunch serve`
is given a Slack channel. It posts with slack-sdk's `WebClient.chat_postMessage`:

- always on STOP; optionally on every failed cycle (`--slack-on failure`) or when a
  failure fingerprint recurs (`--slack-on recurring`); optionally (off by default,
  `--slack-straggler-reports N`) a separate alert when a verdict's straggler scores show a
  rank below the threshold in at least N consecutive reports (docs/straggler.md);
- deduplicated per job (one message per (job, cycle), one "recurring" message per
  (job, fingerprint)); with `use_store(repo.alert_recorded, repo.record_alert)` (what
  `relaunch serve` does) the worker also skips alerts a previous process sent and records
  each one Slack accepted, so a restarted service does not alert again; rate limited
  per job (STOP messages are never dropped by the
  limit; suppressed messages are counted in the next one sent);
- sent by a background worker thread: the listener only enqueues, so analysis is never
  blocked or broken. Posts are spaced by at least `min_post_interval_s` (Slack's limit
  is about one message per second per channel). Failures (HTTP errors, `ok: false`, 429 with Retry-After, connection
  errors) are logged and retried with backoff, then dropped with a log line.

`relaunch serve`'s Slack flags live in `relaunch_cli.slack_options`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from relaunch.restart_agent.model import Decision, StragglerReport, Verdict

if TYPE_CHECKING:
    from relaunch.attribution.core.engine import VerdictEvent

log = logging.getLogger(__name__)

TRIGGERS = ("stop", "failure", "recurring")
ENV_TOKEN = "SLACK_BOT_TOKEN"
DEFAULT_BASE_URL = "https://slack.com/api/"
_MAX_TEXT = 600  # characters of log text quoted in one message


@dataclass
class SlackConfig:
    """What to send where, and how hard to try."""

    token: str
    channel: str
    on: frozenset[str] = frozenset({"stop"})
    dashboard_url: str | None = None
    base_url: str = DEFAULT_BASE_URL
    per_job_burst: int = 3  # non-STOP messages allowed per job in one window
    per_job_window_s: float = 60.0
    min_post_interval_s: float = 1.0  # Slack allows about one message per second per channel
    max_attempts: int = 5
    backoff_s: float = 1.0  # first retry delay; doubles each attempt (Retry-After wins)
    max_backoff_s: float = 60.0
    timeout_s: int = 10
    queue_size: int = 1000
    straggler_reports: int | None = None  # alert on a rank slow in >= N reports (None: off)

    def __post_init__(self) -> None:
        if self.straggler_reports is not None and self.straggler_reports < 1:
            raise ValueError("--slack-straggler-reports must be >= 1")
        unknown = set(self.on) - set(TRIGGERS)
        if unknown:
            raise ValueError(f"unknown --slack-on value(s): {', '.join(sorted(unknown))}")
        self.on = frozenset(self.on) | {"stop"}


@dataclass
class _Outgoing:
    job_id: str
    cycle: int | None
    kind: str  # stop | failure | recurring | straggler
    text: str
    blocks: list[dict[str, Any]]
    verdict: Verdict | None = None
    suppressed: int = 0
    attempts: int = 0
    not_before: float = 0.0

    def store_keys(self) -> list[str]:
        """What the alert store records once this alert is sent."""
        if self.kind == "straggler":
            return [] if self.cycle is None else [f"slack:straggler:{self.cycle}"]
        v = self.verdict
        decision = v.decision if v is not None else None
        keys = [] if self.cycle is None else [f"slack:cycle:{self.cycle}:{decision}"]
        if self.kind == "recurring":
            fp = str((v.primary.fingerprint if v is not None and v.primary else None) or "")
            keys.append(f"slack:recurring:{fp}"[:512])
        return keys


@dataclass
class _JobState:
    sent_cycles: set[tuple[int, str]] = field(default_factory=set)  # (cycle, decision)
    recurring_fps: set[str] = field(default_factory=set)
    straggler_cycles: set[int | None] = field(default_factory=set)
    recent: list[float] = field(default_factory=list)  # send times inside the window
    suppressed: int = 0


def event_fields(event: VerdictEvent) -> tuple[str, int, Verdict]:
    """(job_id, cycle, verdict) of an engine `VerdictEvent`."""
    return event.job_id, event.cycle, event.verdict


def _typed(verdict: Verdict | Mapping[str, Any]) -> Verdict | None:
    """The verdict as a `Verdict`: JSON (a verdict read back from storage) is read once here."""
    return verdict if isinstance(verdict, Verdict) else Verdict.read(dict(verdict))


def slack_escape(text: str) -> str:
    """Escape the three characters Slack mrkdwn treats as control (`&`, `<`, `>`).

    Log text is untrusted: without this a line could ping `<!channel>` or forge a link.
    """
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int = _MAX_TEXT) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _code(text: str) -> str:
    # Backticks inside a code span would end it early.
    return "`" + slack_escape(_clip(text)).replace("`", "'") + "`"


def cycle_url(dashboard_url: str | None, job_id: str, cycle: int | None) -> str | None:
    """Dashboard link of a cycle (or of the job when the cycle is unknown)."""
    if not dashboard_url:
        return None
    from urllib.parse import quote

    base = dashboard_url.rstrip("/") + "/jobs/" + quote(job_id, safe="")
    return base if cycle is None else f"{base}/cycles/{cycle}"


def dashboard_button(url: str) -> dict[str, Any]:
    """The Block Kit actions block with the "Open in dashboard" button."""
    return {
        "type": "actions",
        "elements": [
            {
                "type": "button",
                "text": {"type": "plain_text", "text": "Open in dashboard"},
                "url": url,
            }
        ],
    }


def build_message(
    job_id: str,
    cycle: int | None,
    verdict: Verdict,
    *,
    kind: str,
    dashboard_url: str | None = None,
    suppressed: int = 0,
) -> tuple[str, list[dict[str, Any]]]:
    """The fallback text and Block Kit blocks of one alert."""
    decision = str(verdict.decision)
    primary = verdict.primary
    failure_class = str((primary.failure_class if primary else None) or "unknown failure")
    basis = _clip(verdict.basis or "", 300)
    rule = str(verdict.rule or "?")
    cycle_txt = "?" if cycle is None else str(cycle)
    title = {
        "stop": f"STOP: job {job_id} will not be restarted",
        "recurring": f"Recurring failure in job {job_id}",
        "failure": f"Failed cycle in job {job_id}",
    }.get(kind, f"Verdict for job {job_id}")
    title = _clip(title, 140)
    fields = [
        f"*Job*\n{slack_escape(_clip(job_id, 200))}",
        f"*Cycle*\n{cycle_txt}",
        f"*Verdict*\n{slack_escape(decision)}",
        f"*Failure*\n{slack_escape(_clip(failure_class, 200))}",
        f"*Rule*\n{slack_escape(_clip(rule, 200))}",
    ]
    same_root = verdict.history.same_root_prior_cycles
    if same_root:
        fields.append(f"*Seen before*\n{int(same_root)} prior cycle(s)")
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": f} for f in fields]},
    ]
    if basis:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": slack_escape(basis)}})
    if primary is not None and primary.text:
        where = f"line {primary.line}"
        if primary.rank is not None:
            where += f", rank {primary.rank}"
            if primary.rank_source == "cascade_reporter":
                where += " (reported the cascade, not blamed)"
        blocks.append(
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": f"*Evidence* ({where}): {_code(primary.text)}",
                },
            }
        )
    context: list[str] = []
    if primary is not None and primary.fingerprint:
        context.append(f"fingerprint {_code(str(primary.fingerprint))}")
    if suppressed:
        context.append(f"{suppressed} earlier alert(s) for this job were rate limited")
    if context:
        blocks.append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": c} for c in context]}
        )
    url = cycle_url(dashboard_url, job_id, cycle)
    if url:
        blocks.append(dashboard_button(url))
    text = f"relaunch {decision} job {job_id} cycle {cycle_txt}: {failure_class}"
    if basis:
        text += f" ({basis})"
    if url:
        text += f" {url}"
    return slack_escape(_clip(text, 1000)), blocks


def slow_ranks(stragglers: StragglerReport | None, reports: int) -> list[dict[str, Any]]:
    """Named stragglers whose run below the threshold reached `reports` reports (the
    longest run from the per-node scores when it is longer than the last fact's count)."""
    if stragglers is None:
        return []
    longest: dict[tuple[str, str], int] = {}
    for sc in _list(stragglers.scores):
        if isinstance(sc, Mapping) and isinstance(sc.get("ranks"), Mapping):
            for r, v in sc["ranks"].items():
                if isinstance(v, Mapping) and isinstance(v.get("below"), int):
                    longest[(str(sc.get("node")), str(r))] = int(v["below"])
    out = []
    for s in _list(stragglers.named):
        if not isinstance(s, Mapping) or not isinstance(s.get("reports"), int):
            continue
        k = max(int(s["reports"]), longest.get((str(s.get("node")), str(s.get("rank"))), 0))
        if k >= reports:
            out.append({**s, "reports": k})
    return out


def straggler_message(
    job_id: str,
    cycle: int | None,
    slow: list[dict[str, Any]],
    stragglers: StragglerReport,
    dashboard_url: str | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """The fallback text and Block Kit blocks of a straggler alert."""
    cycle_txt = "?" if cycle is None else str(cycle)
    lines = []
    for s in slow[:16]:
        where = f"rank {s.get('rank')}" + (f" on node {s['node']}" if s.get("node") else "")
        lines.append(
            f"{where}: section {_code(str(s.get('section') or '?'))} relative "
            f"{s.get('relative')} (threshold {s.get('threshold')}), individual "
            f"{s.get('individual')}, {s.get('reports')} reports in a row"
        )
    suspect = stragglers.suspect_rank
    title = _clip(f"Straggler in job {job_id}, cycle {cycle_txt}", 140)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title}},
        {"type": "section", "text": {"type": "mrkdwn", "text": slack_escape("\n".join(lines))}},
    ]
    if suspect is not None:
        blocks.append(
            {
                "type": "context",
                "elements": [
                    {"type": "mrkdwn", "text": f"rank {suspect} is the suspect of the timeout"}
                ],
            }
        )
    url = cycle_url(dashboard_url, job_id, cycle)
    if url:
        blocks.append(dashboard_button(url))
    ranks = ",".join(str(s.get("rank")) for s in slow)
    text = f"relaunch straggler job {job_id} cycle {cycle_txt}: rank(s) {ranks} slow"
    if url:
        text += f" {url}"
    return slack_escape(_clip(text, 1000)), blocks


class SlackNotifier:
    """Engine listener: `notifier(event)` enqueues an alert; a worker thread posts it.

    The worker is deliberately not an `attribution.core.background.BackgroundQueue`: that
    handles items strictly in order, one at a time, with no delayed items. Slack alerts
    wait for timed retries (backoff, 429 Retry-After) in a pending list while newer alerts
    arrive and go out first, and the worker sleeps until the earliest retry is due. On a
    BackgroundQueue a retry would have to sleep inside the handler (a STOP alert stuck
    behind another alert's backoff) or be re-queued at once (a busy loop until it is due).
    """

    def __init__(
        self,
        config: SlackConfig,
        *,
        client: WebClient | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._store: tuple[Callable[[str, str], bool], Callable[[str, str], bool]] | None = None
        self.client = client or WebClient(
            token=config.token,
            base_url=config.base_url,
            timeout=config.timeout_s,
            retry_handlers=[],  # retries are ours, in the worker, never in the caller
        )
        self._clock = clock
        self._jobs: dict[str, _JobState] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[_Outgoing | None] = queue.Queue(maxsize=config.queue_size)
        self._pending: list[_Outgoing] = []  # waiting for a retry
        self._idle = threading.Condition()
        self._busy = 0
        self._stopped = threading.Event()
        self._last_post = float("-inf")
        self.sent = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._run, name="relaunch-slack", daemon=True)
        self._thread.start()

    def use_store(
        self, recorded: Callable[[str, str], bool], record: Callable[[str, str], bool]
    ) -> None:
        """Keep the dedup in a database (`HistoryRepository.alert_recorded` / `record_alert`):
        before its first post the worker skips an alert a previous process already sent, and
        records each alert once Slack accepted it. Used only on the worker thread."""
        self._store = (recorded, record)

    def _already_sent(self, item: _Outgoing) -> bool:
        """Whether a previous process sent this alert (a recurrence already announced turns
        into a plain failure alert, or is skipped without the `failure` trigger). A store
        that fails is logged and the alert goes out: a duplicate beats a lost STOP."""
        if self._store is None:
            return False
        recorded = self._store[0]
        try:
            keys = item.store_keys()
            if item.cycle is not None and recorded(item.job_id, keys[0]):
                return True
            recurring = item.kind == "recurring" and item.verdict is not None
            if recurring and recorded(item.job_id, keys[-1]) and item.verdict is not None:
                if "failure" not in self.config.on:
                    return True
                item.kind = "failure"
                item.text, item.blocks = build_message(
                    item.job_id,
                    item.cycle,
                    item.verdict,
                    kind="failure",
                    dashboard_url=self.config.dashboard_url,
                    suppressed=item.suppressed,
                )
        except Exception:
            log.exception("slack: alert dedup store failed; sending anyway")
        return False

    def _record_sent(self, item: _Outgoing) -> None:
        if self._store is None:
            return
        for key in item.store_keys():
            try:
                self._store[1](item.job_id, key)
            except Exception:
                log.exception("slack: could not record a sent alert (it may be sent again)")

    # ----------------------------------------------------------------- listener side
    def __call__(self, event: VerdictEvent) -> None:
        """Called by the engine after a verdict is saved. Never raises, never blocks."""
        try:
            self.notify(*event_fields(event))
        except Exception:  # a notification must never break analysis
            log.exception("slack: could not queue an alert")

    def notify(
        self, job_id: str, cycle: int | None, verdict: Verdict | Mapping[str, Any]
    ) -> str | None:
        """Queue an alert for one verdict (a `Verdict`, or its JSON read back from storage)
        if it qualifies; return its kind, or None. A straggler alert (its own message) is
        queued first when it qualifies."""
        v = _typed(verdict)
        if v is None:
            return None  # not a verdict (no STOP/RESTART decision): nothing to alert
        self._notify_straggler(job_id, cycle, v)
        kind = self._kind(v)
        if kind is None or self._stopped.is_set():
            return None
        with self._lock:
            state = self._jobs.setdefault(job_id, _JobState())
            key = (cycle, str(v.decision))
            if cycle is not None and key in state.sent_cycles:
                return None  # deduplicated: this cycle's verdict was already alerted
            if kind == "recurring":
                fp = str((v.primary.fingerprint if v.primary else None) or "")
                if fp in state.recurring_fps:
                    if "failure" not in self.config.on:
                        return None
                    kind = "failure"  # recurrence already announced: plain failure alert
                else:
                    state.recurring_fps.add(fp)
            if kind != "stop" and not self._allow(state):
                state.suppressed += 1
                log.info("slack: rate limited a %s alert for job %s", kind, job_id)
                return None
            if cycle is not None:
                state.sent_cycles.add((cycle, key[1]))
            suppressed, state.suppressed = state.suppressed, 0
        text, blocks = build_message(
            job_id,
            cycle,
            v,
            kind=kind,
            dashboard_url=self.config.dashboard_url,
            suppressed=suppressed,
        )
        item = _Outgoing(
            job_id=job_id,
            cycle=cycle,
            kind=kind,
            text=text,
            blocks=blocks,
            verdict=v,
            suppressed=suppressed,
        )
        return kind if self._enqueue(item) else None

    def _enqueue(self, item: _Outgoing) -> bool:
        """Hand an alert to the worker thread; False (logged) when its queue is full."""
        with self._idle:
            self._busy += 1
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()
            log.error("slack: queue full, dropped a %s alert for job %s", item.kind, item.job_id)
            return False
        return True

    def _notify_straggler(self, job_id: str, cycle: int | None, verdict: Verdict) -> bool:
        """Queue a straggler alert when a rank was slow in >= `straggler_reports` reports."""
        need = self.config.straggler_reports
        report = verdict.stragglers
        slow = slow_ranks(report, need) if need is not None else []
        if report is None or not slow or self._stopped.is_set():
            return False
        with self._lock:
            state = self._jobs.setdefault(job_id, _JobState())
            if cycle in state.straggler_cycles or not self._allow(state):
                return False
            state.straggler_cycles.add(cycle)
        text, blocks = straggler_message(job_id, cycle, slow, report, self.config.dashboard_url)
        item = _Outgoing(job_id, cycle, "straggler", text, blocks, verdict=verdict)
        return self._enqueue(item)

    def _kind(self, verdict: Verdict) -> str | None:
        if verdict.decision == Decision.STOP:
            return "stop"
        if verdict.decision != Decision.RESTART:
            return None
        same_root = verdict.history.same_root_prior_cycles
        if "recurring" in self.config.on and int(same_root or 0) > 0:
            return "recurring"
        if "failure" in self.config.on:
            return "failure"
        return None

    def _allow(self, state: _JobState) -> bool:
        now = self._clock()
        window = self.config.per_job_window_s
        state.recent = [t for t in state.recent if now - t < window]
        if len(state.recent) >= self.config.per_job_burst:
            return False
        state.recent.append(now)
        return True

    # ------------------------------------------------------------------- worker side
    def _run(self) -> None:
        while True:
            timeout = self._next_wakeup()
            try:
                item = self._queue.get(timeout=timeout)
            except queue.Empty:
                item = None
            else:
                if item is None:  # close()
                    self._drain_on_close()
                    return
                self._pending.append(item)
            self._send_due()

    def _next_wakeup(self) -> float | None:
        if not self._pending:
            return None
        return max(0.0, min(p.not_before for p in self._pending) - time.monotonic())

    def _send_due(self) -> None:
        now = time.monotonic()
        due = [p for p in self._pending if p.not_before <= now]
        for item in due:
            self._pending.remove(item)
            wait = self._last_post + self.config.min_post_interval_s - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            self._attempt(item)
            self._last_post = time.monotonic()

    def _attempt(self, item: _Outgoing) -> None:
        if item.attempts == 0 and self._already_sent(item):
            log.info(
                "slack: %s alert for job %s cycle %s was sent before",
                item.kind,
                item.job_id,
                item.cycle,
            )
            self._done()
            return
        item.attempts += 1
        delay: float | None = None
        try:
            resp = self.client.chat_postMessage(
                channel=self.config.channel, text=item.text, blocks=item.blocks
            )
            if not resp.get("ok", False):
                raise SlackApiError(f"slack answered ok=false: {resp.get('error')}", resp)
        except SlackApiError as exc:
            status = getattr(exc.response, "status_code", None)
            headers = getattr(exc.response, "headers", None) or {}
            error = exc.response.get("error") if exc.response is not None else None
            if status == 429:
                delay = _retry_after(headers)
            log.warning(
                "slack: posting a %s alert for job %s failed (attempt %d, status %s, %s)",
                item.kind,
                item.job_id,
                item.attempts,
                status,
                error,
            )
            if error in ("invalid_auth", "not_authed", "channel_not_found", "account_inactive"):
                item.attempts = self.config.max_attempts  # retrying cannot help
            self._retry_or_drop(item, delay)
            return
        except Exception as exc:  # noqa: BLE001 - connection refused, timeout, DNS...
            log.warning(
                "slack: posting a %s alert for job %s failed (attempt %d): %s",
                item.kind,
                item.job_id,
                item.attempts,
                exc,
            )
            self._retry_or_drop(item, None)
            return
        self.sent += 1
        self._record_sent(item)
        self._done()

    def _retry_or_drop(self, item: _Outgoing, delay: float | None) -> None:
        if item.attempts >= self.config.max_attempts or self._stopped.is_set():
            self.failed += 1
            log.error(
                "slack: gave up on a %s alert for job %s cycle %s after %d attempt(s)",
                item.kind,
                item.job_id,
                item.cycle,
                item.attempts,
            )
            self._done()
            return
        if delay is None:
            delay = self.config.backoff_s * (2 ** (item.attempts - 1))
        item.not_before = time.monotonic() + min(delay, self.config.max_backoff_s)
        self._pending.append(item)

    def _done(self) -> None:
        with self._idle:
            self._busy -= 1
            self._idle.notify_all()

    def _drain_on_close(self) -> None:
        for item in self._pending:
            self.failed += 1
            log.error("slack: shutting down, dropped a %s alert for job %s", item.kind, item.job_id)
            self._done()
        self._pending.clear()

    # ------------------------------------------------------------------------ control
    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued alert is sent or given up; True if the queue is empty."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._busy > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def close(self, timeout: float = 3.0) -> None:
        """Send what is due within `timeout`, then stop the worker."""
        self.flush(timeout)
        self._stopped.set()
        self._queue.put(None)
        self._thread.join(timeout)


def _retry_after(headers: Mapping[str, Any]) -> float:
    for key, value in headers.items():
        if str(key).lower() == "retry-after":
            raw = value[0] if isinstance(value, list | tuple) else value
            try:
                return max(0.0, float(raw))
            except (TypeError, ValueError):
                break
    return 1.0


def _list(v: Any) -> list[Any]:
    """A stored list, or [] for anything else (stored JSON may be of any shape)."""
    return v if isinstance(v, list) else []
