"""The log funnel writer: a gRPC server that appends streamed lines to confined files.

Runs a `grpc.aio` server on its own thread and event loop, so thousands of node streams
are served concurrently and every file write happens on that one thread: one writer per
file, each batch written as whole lines with a single `os.write` loop on an O_APPEND
descriptor, so two lines are never interleaved or torn. Paths are confined to the root
(`paths.open_confined`); a rejected path ends the stream with a gRPC error status.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import defaultdict
from collections.abc import AsyncIterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from relaunch.launcher.funnel import log_funnel_pb2, log_funnel_pb2_grpc
from relaunch.launcher.funnel.paths import PathRejected, open_confined

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 << 20
_STATUS = {
    "invalid": grpc.StatusCode.INVALID_ARGUMENT,
    "escape": grpc.StatusCode.PERMISSION_DENIED,
    "os": grpc.StatusCode.FAILED_PRECONDITION,
}


@dataclass
class _OpenFile:
    fd: int
    real_path: str
    users: int = 0


class _Files:
    """Open descriptors by real path, shared by the streams writing the same file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._by_path: dict[str, _OpenFile] = {}

    def acquire(self, relpath: str) -> _OpenFile:
        fd, real = open_confined(self.root, relpath)
        existing = self._by_path.get(real)
        if existing is not None:
            os.close(fd)
            existing.users += 1
            return existing
        opened = _OpenFile(fd, real, 1)
        self._by_path[real] = opened
        return opened

    def release(self, f: _OpenFile) -> None:
        f.users -= 1
        if f.users <= 0 and self._by_path.get(f.real_path) is f:
            del self._by_path[f.real_path]
            os.close(f.fd)

    def close_all(self) -> None:
        for f in self._by_path.values():
            os.close(f.fd)
        self._by_path.clear()

    def __len__(self) -> int:
        return len(self._by_path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class _Servicer(log_funnel_pb2_grpc.LogFunnelServicer):
    def __init__(self, server: FunnelServer) -> None:
        self._server = server

    async def StreamLines(  # gRPC method name
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> Any:
        srv = self._server
        node = ""
        current: _OpenFile | None = None
        lines_written = 0
        bytes_written = 0
        try:
            async for batch in request_iterator:
                if batch.node_id:
                    node = batch.node_id
                if batch.path or current is None:
                    if not batch.path:
                        await context.abort(
                            grpc.StatusCode.INVALID_ARGUMENT,
                            "the first batch of a stream must name its log path",
                        )
                    try:
                        opened = srv._files.acquire(batch.path)
                    except PathRejected as exc:
                        log.warning("funnel: node %r: %s", node, exc.message)
                        srv._rejections += 1
                        await context.abort(_STATUS[exc.kind], exc.message)
                    if current is not None:
                        srv._files.release(current)
                    current = opened
                if not batch.lines:
                    continue
                if srv.prefix_node and node:
                    tag = f"[{node}] ".encode()
                    data = b"".join(tag + line + b"\n" for line in batch.lines)
                else:
                    data = b"\n".join(batch.lines) + b"\n"
                try:
                    _write_all(current.fd, data)
                except OSError as exc:
                    await context.abort(
                        grpc.StatusCode.RESOURCE_EXHAUSTED
                        if exc.errno == getattr(os, "ENOSPC", -1)
                        else grpc.StatusCode.INTERNAL,
                        f"writing {current.real_path} failed: {exc.strerror}",
                    )
                n = len(batch.lines)
                lines_written += n
                bytes_written += len(data)
                srv._node_lines[node] += n
                srv._path_lines[current.real_path] += n
        finally:
            if current is not None:
                srv._files.release(current)
        return log_funnel_pb2.StreamSummary(
            lines_written=lines_written, bytes_written=bytes_written
        )

    async def Ping(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return log_funnel_pb2.PingResponse(ok=True, open_files=len(self._server._files))


class FunnelServer:
    """The writer. `start()` returns the bound port; `address` is `host:port`."""

    def __init__(
        self,
        root: Path | str,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        prefix_node: bool = False,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self.root = Path(root)
        self.host = host
        self.port = port
        self.prefix_node = prefix_node
        self.max_message_bytes = max_message_bytes
        self._files = _Files(self.root)
        self._node_lines: dict[str, int] = defaultdict(int)
        self._path_lines: dict[str, int] = defaultdict(int)
        self._rejections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: grpc.aio.Server | None = None
        self._stopped: asyncio.Event | None = None

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def start(self) -> int:
        if self._thread is not None:
            raise RuntimeError("FunnelServer already started")
        self.root.mkdir(parents=True, exist_ok=True)
        ready: Future[int] = Future()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="relaunch-funnel", daemon=True
        )
        self._thread.start()
        try:
            self.port = ready.result(timeout=30)
        except BaseException:
            self._thread.join(timeout=5)
            self._thread = None
            raise
        return self.port

    def _run(self, ready: Future[int]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve(ready))
        finally:
            self._files.close_all()
            loop.close()

    async def _serve(self, ready: Future[int]) -> None:
        try:
            server = grpc.aio.server(
                options=[
                    ("grpc.max_receive_message_length", self.max_message_bytes),
                    ("grpc.so_reuseport", 0),
                ]
            )
            log_funnel_pb2_grpc.add_LogFunnelServicer_to_server(_Servicer(self), server)
            host = f"[{self.host}]" if ":" in self.host else self.host
            port = server.add_insecure_port(f"{host}:{self.port}")
            if port == 0:
                raise OSError(f"log funnel could not bind {host}:{self.port}")
            await server.start()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread, which re-raises it
            ready.set_exception(exc)
            return
        self._server = server
        self._stopped = asyncio.Event()
        ready.set_result(port)
        await self._stopped.wait()

    def stop(self, grace: float | None = 2.0) -> None:
        """Stop accepting streams, let running ones finish for `grace` s, close files."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        async def _shutdown() -> None:
            if self._server is not None:
                await self._server.stop(grace)
            if self._stopped is not None:
                self._stopped.set()

        if not loop.is_closed():
            asyncio.run_coroutine_threadsafe(_shutdown(), loop).result(timeout=(grace or 0) + 30)
        thread.join(timeout=30)
        self._thread = None
        self._loop = None

    def stats(self) -> dict[str, Any]:
        """Lines written per node id and per file, open files and rejected paths."""
        loop = self._loop
        if loop is not None and loop.is_running():

            async def _snapshot() -> dict[str, Any]:
                return self._stats_now()

            return asyncio.run_coroutine_threadsafe(_snapshot(), loop).result(timeout=30)
        return self._stats_now()

    def _stats_now(self) -> dict[str, Any]:
        return {
            "lines_by_node": dict(self._node_lines),
            "lines_by_path": dict(self._path_lines),
            "open_files": len(self._files),
            "rejected_paths": self._rejections,
        }

    def __enter__(self) -> FunnelServer:
        if self._thread is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
