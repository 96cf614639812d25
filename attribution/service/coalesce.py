"""Coalesce identical concurrent requests: one analysis per key, every caller shares it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Executor, Future
from typing import Any


class Coalescer:
    """`submit(key, fn)` runs `fn` once per key while a run for that key is in flight."""

    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self._inflight: dict[Hashable, Future[Any]] = {}
        self._lock = threading.Lock()
        self.started = 0  # analyses actually run
        self.joined = 0  # requests that joined one already in flight

    def inflight(self) -> int:
        with self._lock:
            return len(self._inflight)

    def get(self, key: Hashable) -> Future[Any] | None:
        with self._lock:
            return self._inflight.get(key)

    def join(self, key: Hashable) -> Future[Any] | None:
        """The run in flight for `key` (counted as a joined request), or None."""
        with self._lock:
            fut = self._inflight.get(key)
            if fut is not None:
                self.joined += 1
            return fut

    def submit(self, key: Hashable, fn: Callable[[], Any]) -> tuple[Future[Any], bool]:
        """Return (future, started_new)."""
        with self._lock:
            fut = self._inflight.get(key)
            if fut is not None:
                self.joined += 1
                return fut, False
            fut = self._executor.submit(fn)
            self._inflight[key] = fut
            self.started += 1

        def _done(f: Future[Any], key: Hashable = key) -> None:
            with self._lock:
                if self._inflight.get(key) is f:
                    del self._inflight[key]

        fut.add_done_callback(_done)
        return fut, True
