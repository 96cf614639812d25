"""A small OpenAI-compatible chat-completions server for the LLM tests (real HTTP, loopback).

Tests script it per model name: `POST /_script {"model": M, "steps": [...],
"reject_json_schema": bool}`; each `POST /v1/chat/completions` for model M takes the next
step (the last one repeats). A step is `{"status": 200, "content": "...", "delay": s,
"headers": {...}, "echo_key": bool}`, or with `"cite": {"quote": Q, ...}` instead of
`content`: a grounded answer (`tests._llm_helpers.answer`) citing the first prompt line
(`N| text`) that contains Q, for logs whose line numbers the test cannot know in advance.
A status other than 200 returns an OpenAI-style error body (with the caller's bearer
token in it when `echo_key`, as careless servers do).
Every request is recorded (`GET /_requests?model=M`): body, Authorization header, arrival
time. `LLMServer` runs it with uvicorn on 127.0.0.1 on a real socket in a thread.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
import uuid
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse


def create_app() -> FastAPI:
    app = FastAPI()
    scripts: dict[str, dict[str, Any]] = {}
    requests: list[dict[str, Any]] = []

    @app.post("/_script")
    async def script(payload: dict[str, Any]) -> dict[str, str]:
        scripts[payload["model"]] = {
            "steps": list(payload.get("steps") or [{"status": 200, "content": "{}"}]),
            "reject_json_schema": bool(payload.get("reject_json_schema")),
            "served": 0,
        }
        return {"ok": "scripted"}

    @app.get("/_requests")
    async def recorded(model: str) -> list[dict[str, Any]]:
        return [r for r in requests if r["body"].get("model") == model]

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        auth = request.headers.get("authorization", "")
        requests.append({"body": body, "authorization": auth, "t": time.monotonic()})
        model = body.get("model", "")
        entry = scripts.get(model)
        if entry is None:
            return _error(404, f"model {model!r} is not scripted", "not_found")
        fmt = (body.get("response_format") or {}).get("type")
        if entry["reject_json_schema"] and fmt == "json_schema":
            return _error(
                400, "response_format json_schema is not supported", "invalid_request_error"
            )
        steps = entry["steps"]
        step = steps[min(entry["served"], len(steps) - 1)]
        entry["served"] += 1
        if step.get("delay"):
            await asyncio.sleep(float(step["delay"]))
        status = int(step.get("status", 200))
        headers = {str(k): str(v) for k, v in (step.get("headers") or {}).items()}
        if status != 200:
            message = step.get("message", f"scripted failure {status}")
            if step.get("echo_key"):
                message += f" (Incorrect API key provided: {auth.removeprefix('Bearer ')})"
            return _error(status, message, "server_error", headers)
        content = step.get("content", "")
        if step.get("cite"):
            content = _cited_answer(body, dict(step["cite"]))
        prompt_chars = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_chars // 4,
                    "completion_tokens": len(content) // 4,
                    "total_tokens": prompt_chars // 4 + len(content) // 4,
                },
            },
            headers=headers,
        )

    return app


def _cited_answer(body: dict[str, Any], cite: dict[str, Any]) -> str:
    from tests._llm_helpers import answer  # the helpers import this module

    quote = str(cite.pop("quote"))
    text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
    m = re.search(rf"^(\d+)\| .*{re.escape(quote)}", text, re.M)
    return answer(int(m.group(1)), quote, **cite) if m else "{}"


def _error(
    status: int, message: str, kind: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": None}},
        status_code=status,
        headers=headers or {},
    )


class LLMServer:
    """uvicorn serving `create_app()` on 127.0.0.1:<free port>, in a daemon thread."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(
            create_app(), log_level="warning", timeout_graceful_shutdown=1, lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LLMServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test LLM server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(5)
        self.sock.close()

    def script(self, steps: list[dict[str, Any]], *, reject_json_schema: bool = False) -> str:
        """Script a fresh model name and return it."""
        import httpx

        model = f"scripted-{uuid.uuid4().hex[:10]}"
        r = httpx.post(
            f"{self.root}/_script",
            json={"model": model, "steps": steps, "reject_json_schema": reject_json_schema},
            timeout=5,
        )
        r.raise_for_status()
        return model

    def requests(self, model: str) -> list[dict[str, Any]]:
        import httpx

        r = httpx.get(f"{self.root}/_requests", params={"model": model}, timeout=5)
        r.raise_for_status()
        return r.json()
