"""`FunnelSink`: a `LineSink` (launcher.cycle_log) that streams lines to the funnel writer.

Lines are batched (by count and bytes) and sent over one client-streaming gRPC call.
Memory is bounded: at most `max_pending_batches` full batches wait for the network; when
the writer is slower than the producer, `write_line` blocks (backpressure) and raises
`FunnelError` only if the writer accepts nothing for `send_timeout_s`. A partial batch is
sent after `flush_interval_s`, on `flush()` and on `close()`, which waits for the writer's
summary. A writer that rejects the path (or fails) turns the next `write_line`/`close`
into a `FunnelError` carrying the writer's message.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc

from relaunch.launcher.funnel import log_funnel_pb2, log_funnel_pb2_grpc

_END = object()


class FunnelError(RuntimeError):
    """The funnel writer rejected the stream or could not be reached."""


def _encode(line: str) -> bytes:
    if line.endswith("\n"):
        line = line[:-1]
    try:
        return line.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return line.encode("utf-8", "replace")


class FunnelSink:
    """Stream whole lines for `relpath` (relative to the writer's root) to `address`."""

    def __init__(
        self,
        address: str,
        relpath: str,
        *,
        node_id: str | None = None,
        batch_lines: int = 1024,
        batch_bytes: int = 256 << 10,
        max_pending_batches: int = 16,
        flush_interval_s: float = 0.1,
        send_timeout_s: float = 60.0,
        close_timeout_s: float = 60.0,
    ) -> None:
        if not relpath:
            raise ValueError("funnel log path is empty")
        if not address or (":" not in address) or address.endswith(":"):
            raise ValueError(f"funnel address {address!r}: expected host:port or unix:/path")
        if batch_lines < 1 or batch_bytes < 1 or max_pending_batches < 1:
            raise ValueError("funnel batch sizes and queue length must be >= 1")
        self.address = address
        self.relpath = relpath
        self.node_id = node_id or socket.gethostname()
        self.batch_lines = batch_lines
        self.batch_bytes = batch_bytes
        self.flush_interval_s = flush_interval_s
        self.send_timeout_s = send_timeout_s
        self.close_timeout_s = close_timeout_s
        self._lock = threading.Lock()
        self._batch: list[bytes] = []
        self._batch_size = 0
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_pending_batches)
        self._closed = False
        self._summary: Any = None
        self.lines_sent = 0
        self._channel = grpc.insecure_channel(
            address, options=[("grpc.max_send_message_length", 64 << 20)]
        )
        stub = log_funnel_pb2_grpc.LogFunnelStub(self._channel)
        self._call = stub.StreamLines.future(self._requests(), wait_for_ready=True)

    # -- the request stream, consumed by gRPC's sender thread ---------------------------
    def _requests(self) -> Iterator[Any]:
        yield log_funnel_pb2.LineBatch(node_id=self.node_id, path=self.relpath)
        while True:
            try:
                item = self._queue.get(timeout=self.flush_interval_s)
            except queue.Empty:
                item = self._take_partial()
                if item is None:
                    continue
            if item is _END:
                return
            yield log_funnel_pb2.LineBatch(lines=item)

    def _take_partial(self) -> list[bytes] | None:
        with self._lock:
            if not self._batch:
                return None
            batch, self._batch, self._batch_size = self._batch, [], 0
            return batch

    def _failure(self) -> FunnelError | None:
        if not self._call.done():
            return None
        try:
            self._call.result(timeout=0)
        except grpc.RpcError as exc:
            code = exc.code().name if hasattr(exc, "code") else "UNKNOWN"
            details = exc.details() if hasattr(exc, "details") else str(exc)
            if code in ("UNAVAILABLE", "CANCELLED", "DEADLINE_EXCEEDED"):
                return FunnelError(
                    f"log funnel at {self.address} went away while streaming "
                    f"{self.relpath!r} ({code}): {details}"
                )
            return FunnelError(
                f"log funnel at {self.address} refused {self.relpath!r} ({code}): {details}"
            )
        except Exception as exc:  # noqa: BLE001
            return FunnelError(f"log funnel at {self.address} failed: {exc}")
        if not self._closed:
            return FunnelError(f"log funnel at {self.address} ended the stream early")
        return None

    def _enqueue(self, item: Any) -> None:
        deadline = time.monotonic() + self.send_timeout_s
        while True:
            err = self._failure()
            if err is not None:
                raise err
            try:
                self._queue.put(item, timeout=min(0.5, self.send_timeout_s))
                return
            except queue.Full:
                if time.monotonic() >= deadline:
                    raise FunnelError(
                        f"log funnel at {self.address} accepted nothing for "
                        f"{self.send_timeout_s:g}s"
                    ) from None

    # -- LineSink ------------------------------------------------------------------------
    def write_line(self, line: str) -> None:
        self.write_bytes(_encode(line))

    def write_bytes(self, line: bytes) -> None:
        """Write one line given as bytes (without its newline)."""
        if self._closed:
            raise FunnelError("write_line after close")
        full: list[bytes] | None = None
        with self._lock:
            self._batch.append(line)
            self._batch_size += len(line) + 1
            if len(self._batch) >= self.batch_lines or self._batch_size >= self.batch_bytes:
                full, self._batch, self._batch_size = self._batch, [], 0
        self.lines_sent += 1
        if full is not None:
            self._enqueue(full)
        elif self._call.done():
            err = self._failure()
            if err is not None:
                raise err

    def flush(self) -> None:
        """Hand the partial batch to the sender now (does not wait for the writer)."""
        partial = self._take_partial()
        if partial:
            self._enqueue(partial)

    def close(self) -> None:
        """Send what is left, end the stream and wait for the writer's summary."""
        if self._closed:
            return
        try:
            self.flush()
            self._closed = True
            self._enqueue(_END)
            try:
                self._summary = self._call.result(timeout=self.close_timeout_s)
            except grpc.FutureTimeoutError:
                self._call.cancel()
                raise FunnelError(
                    f"log funnel at {self.address} did not confirm within {self.close_timeout_s:g}s"
                ) from None
            except grpc.RpcError:
                err = self._failure()
                raise err if err is not None else FunnelError("log funnel stream failed") from None
        finally:
            self._closed = True
            self._channel.close()

    @property
    def summary(self) -> dict[str, int] | None:
        """The writer's count of what it wrote for this stream (after `close`)."""
        if self._summary is None:
            return None
        return {
            "lines_written": int(self._summary.lines_written),
            "bytes_written": int(self._summary.bytes_written),
        }

    def __enter__(self) -> FunnelSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
