"""Webhook export against a real HTTP receiver on 127.0.0.1.

Retries with backoff on 5xx and connection errors, no retry on other 4xx, a bounded
queue that drops the oldest when full, and a listener call that never waits for the
network. The last test points the real service's `--webhook-url` at the receiver.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from relaunch.attribution.core.export import EXPORT_SCHEMA, WebhookExporter, event_payload
from tests._service_helpers import free_port


class Receiver:
    """A loopback HTTP server that records POSTed JSON and answers scripted statuses."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.statuses = list(statuses or [])
        self.received: list[dict] = []
        self.attempts = 0
        self.gate = threading.Event()
        self.gate.set()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                outer.gate.wait(30)
                outer.attempts += 1
                status = outer.statuses.pop(0) if outer.statuses else 200
                if status < 300:
                    outer.received.append(json.loads(body))
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.gate.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    made: list[Receiver] = []

    def make(statuses: list[int] | None = None) -> Receiver:
        made.append(Receiver(statuses))
        return made[-1]

    yield make
    for r in made:
        r.close()


def payload(i: int) -> dict:
    return {"schema": EXPORT_SCHEMA, "job_id": "j", "cycle": i, "decision": "RESTART"}


def wait_for(cond, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_retries_5xx_then_delivers(receiver):
    rx = receiver([503, 500])
    ex = WebhookExporter(rx.url, backoff_base_s=0.01)
    ex.submit(payload(0))
    assert ex.flush(20)
    ex.close()
    assert rx.attempts == 3 and rx.received == [payload(0)]
    assert (ex.stats.delivered, ex.stats.failed, ex.stats.attempts) == (1, 0, 3)


def test_client_error_is_not_retried(receiver):
    rx = receiver([400])
    ex = WebhookExporter(rx.url, backoff_base_s=0.01)
    ex.submit(payload(0))
    assert ex.flush(20)
    ex.close()
    assert rx.attempts == 1 and ex.stats.failed == 1 and ex.stats.delivered == 0


def test_unreachable_receiver_gives_up_after_bounded_attempts():
    ex = WebhookExporter(f"http://127.0.0.1:{free_port()}/x", max_attempts=3, backoff_base_s=0.01)
    ex.submit(payload(0))
    assert ex.flush(20)
    ex.close()
    assert ex.stats.attempts == 3 and ex.stats.failed == 1


def test_listener_never_blocks_and_queue_is_bounded(receiver):
    rx = receiver()
    rx.gate.clear()  # the receiver hangs until released
    ex = WebhookExporter(rx.url, queue_size=3, backoff_base_s=0.01)
    for i in range(10):
        ex.submit(payload(i))  # returns at once although nothing can be delivered
    assert rx.attempts == 0 and ex.stats.enqueued == 10
    assert ex.stats.dropped >= 6  # at most 3 queued + 1 in flight
    rx.gate.set()
    assert ex.flush(20)
    ex.close()
    assert ex.stats.delivered == 10 - ex.stats.dropped
    cycles = [p["cycle"] for p in rx.received]
    assert cycles == sorted(cycles) and cycles[-1] == 9  # the newest survive, in order


def test_bad_url_is_refused():
    with pytest.raises(ValueError, match="http"):
        WebhookExporter("ftp://example/x")


def test_event_payload_shape(tmp_path: Path):
    """The body carries the verdict's JSON form (plain strings, as saved) of a real event."""
    from relaunch.attribution.core.engine import AttributionEngine, VerdictEvent
    from tests._storage_helpers import syntax_log

    log = tmp_path / "c.log"
    log.write_text(syntax_log())
    verdict = AttributionEngine(None).analyze_cycle(None, None, log)
    event = VerdictEvent(job_id="j", cycle=3, log_path=str(log), verdict=verdict, log_identity={})
    p = event_payload(event)
    assert p == {
        "schema": EXPORT_SCHEMA,
        "job_id": "j",
        "cycle": 3,
        "log_path": str(log),
        "decision": "STOP",
        "verdict": verdict.to_dict(),
        "audit_path": None,
    }
    assert json.dumps(p["verdict"]) == json.dumps(verdict.to_dict())
    assert type(p["decision"]) is str and type(p["verdict"]["rule"]) is str


@pytest.mark.slow
def test_service_exports_each_verdict(receiver, service_factory):
    from tests._service_helpers import require_restart_agent

    require_restart_agent()
    rx = receiver([503])
    svc = service_factory(extra_args=["--webhook-url", rx.url])
    logs = []
    for i in range(2):
        log = svc.root / f"w{i}.log"
        log.write_text("[rank0]: iteration 3\n[rank0]: SyntaxError: invalid syntax\n")
        logs.append(log)
    with svc.client() as c:
        for i, log in enumerate(logs):
            c.post(
                "/logs",
                json={
                    "log_path": str(log),
                    "job_id": "wh",
                    "cycle_id": i,
                    "analysis_intent": "terminal",
                },
            )
            got = c.get("/logs", params={"log_path": str(log)}).json()
            assert got["status"] == "completed"
    wait_for(lambda: len(rx.received) == 2)
    by_cycle = {p["cycle"]: p for p in rx.received}
    assert set(by_cycle) == {0, 1}
    for i, p in by_cycle.items():
        assert p["schema"] == EXPORT_SCHEMA and p["job_id"] == "wh"
        assert p["log_path"] == str(logs[i].resolve())
        assert p["decision"] == p["verdict"]["decision"] in ("STOP", "RESTART")
    assert rx.attempts == 3  # the first delivery was retried once
