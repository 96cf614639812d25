"""`BackgroundQueue`: a queue of items handled one at a time by a daemon thread.

The engine's listener dispatch, its background SHA-256, the LLM enrichment listener and
the webhook exporter all hand work to a thread this way. One class gives them the same
guarantees: `put` never blocks (a full queue drops the new item, or with
`drop_oldest=True` the oldest one, and counts it in `dropped`); `put_wait` blocks while
the queue is full (back-pressure, for the hasher); a handler that raises is logged and
the thread goes on; `drain(timeout)` waits until every queued item was handled (no
polling: a condition variable); `close(timeout)` stops taking items, lets the queued ones
finish (or drops them with `discard=True`) and joins the thread.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class BackgroundQueue(Generic[T]):
    """`handle(item)` for each queued item, in order, on one daemon thread named `name`."""

    def __init__(
        self,
        handle: Callable[[T], object],
        *,
        name: str,
        maxsize: int = 0,
        drop_oldest: bool = False,
    ) -> None:
        """`maxsize` 0 means unbounded."""
        self.name = name
        self.maxsize = max(0, maxsize)
        self.drop_oldest = drop_oldest
        self.dropped = 0
        self._handle = handle
        self._items: deque[T] = deque()
        self._busy = False
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _full(self) -> bool:
        return bool(self.maxsize) and len(self._items) >= self.maxsize

    def put(self, item: T) -> bool:
        """Queue `item` without blocking. False when it was not queued (closed, or full
        without `drop_oldest`); with `drop_oldest` a full queue loses its oldest item."""
        with self._cond:
            if self._closed:
                return False
            if self._full():
                self.dropped += 1
                if not self.drop_oldest:
                    return False
                self._items.popleft()
            self._items.append(item)
            self._cond.notify_all()
            return True

    def put_wait(self, item: T) -> None:
        """Queue `item`, waiting while the queue is full. RuntimeError once closed."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or not self._full())
            if self._closed:
                raise RuntimeError(f"{self.name}: queue is closed")
            self._items.append(item)
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pending(self) -> int:
        """Items queued or being handled."""
        with self._cond:
            return len(self._items) + (1 if self._busy else 0)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every queued item was handled; False when `timeout` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._items and not self._busy, timeout)

    def close(self, timeout: float | None = None, *, discard: bool = False) -> bool:
        """Take no more items; finish the queued ones (`discard=True`: drop them) and wait
        up to `timeout` for the thread to end. True when it ended."""
        with self._cond:
            self._closed = True
            if discard:
                self._items.clear()
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._items or self._closed)
                if not self._items:
                    return  # closed and empty
                item = self._items.popleft()
                self._busy = True
                self._cond.notify_all()  # room for put_wait
            try:
                self._handle(item)
            except Exception:
                log.exception("%s: handling a queued item failed", self.name)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
