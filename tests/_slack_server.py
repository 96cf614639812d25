"""A Slack-Web-API-compatible HTTP server on 127.0.0.1 for tests.

Answers `POST /api/chat.postMessage` like Slack does (`{"ok": true, "channel", "ts",
"message"}`), records every request (JSON or form body, headers), and can be scripted
to fail: `server.script(["429:2", "error:internal_error", "500", "ok"])` makes the next
requests get, in order, a 429 with `Retry-After: 2`, `{"ok": false, "error": ...}`, an
HTTP 500, then success; `"sleep:1.5"` answers success after 1.5 s. Unscripted requests succeed.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs


class SlackServer:
    """Start with `with SlackServer() as slack:`; `slack.base_url` goes to `WebClient`."""

    def __init__(self, token: str = "xoxb-test-token") -> None:
        self.token = token
        self.requests: list[dict[str, Any]] = []  # every request, including failed ones
        self.messages: list[dict[str, Any]] = []  # bodies of accepted chat.postMessage calls
        self._script: deque[str] = deque()
        self._cond = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                outer._handle(self)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/api/"

    def script(self, answers: list[str]) -> None:
        with self._cond:
            self._script.extend(answers)

    def wait_for(self, n: int, timeout: float = 10.0, *, requests: bool = False) -> list[Any]:
        """Block until `n` messages (or requests) arrived; return them."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.requests if requests else self.messages) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return list(self.requests if requests else self.messages)

    def __enter__(self) -> SlackServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # ------------------------------------------------------------------ internals
    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length).decode("utf-8") if length else ""
        ctype = h.headers.get("Content-Type", "")
        if "json" in ctype:
            body = json.loads(raw or "{}")
        else:
            body = {k: v[0] for k, v in parse_qs(raw).items()}
            if isinstance(body.get("blocks"), str):
                body["blocks"] = json.loads(body["blocks"])
        record = {
            "path": h.path,
            "auth": h.headers.get("Authorization"),
            "body": body,
            "time": time.monotonic(),
        }
        with self._cond:
            answer = self._script.popleft() if self._script else "ok"
            record["answer"] = answer
            self.requests.append(record)
            if h.path != "/api/chat.postMessage":
                status, payload, headers = 404, {"ok": False, "error": "unknown_method"}, {}
            elif record["auth"] != f"Bearer {self.token}":
                status, payload, headers = 200, {"ok": False, "error": "invalid_auth"}, {}
            else:
                status, payload, headers = self._answer(answer, body)
                if status == 200 and payload.get("ok"):
                    self.messages.append(body)
            self._cond.notify_all()
        if answer.startswith("sleep:"):  # answer late (then succeed): a slow Slack
            time.sleep(float(answer.partition(":")[2]))
        data = json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json; charset=utf-8")
        h.send_header("Content-Length", str(len(data)))
        for k, v in headers.items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    def _answer(self, answer: str, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict]:
        if answer.startswith("429"):
            retry = answer.partition(":")[2] or "1"
            return 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": retry}
        if answer.startswith("error:"):
            return 200, {"ok": False, "error": answer.partition(":")[2]}, {}
        if answer.isdigit():
            return int(answer), {"ok": False, "error": "server_error"}, {}
        ts = f"{time.time():.6f}"
        return (
            200,
            {
                "ok": True,
                "channel": body.get("channel"),
                "ts": ts,
                "message": {"text": body.get("text"), "ts": ts},
            },
            {},
        )
