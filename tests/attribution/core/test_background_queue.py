"""`attribution.core.background.BackgroundQueue`: order, bounds, drop counts, errors, stop.

The handler is held on a `threading.Event`, so every state is reached by the test's own
steps, never by timing.
"""

from __future__ import annotations

import logging
import threading

import pytest

from relaunch.attribution.core.background import BackgroundQueue


class Gate:
    """A handler that records items and blocks on the first one until released."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, item: int) -> None:
        self.started.set()
        assert self.release.wait(60)
        if item < 0:
            raise RuntimeError(f"bad item {item}")
        self.seen.append(item)


def test_items_are_handled_in_order_and_drain_waits_for_them() -> None:
    gate = Gate()
    q: BackgroundQueue[int] = BackgroundQueue(gate, name="t-order")
    for i in range(5):
        assert q.put(i)
    assert gate.started.wait(60)
    assert not q.drain(0) and q.pending == 5  # one being handled, four queued
    gate.release.set()
    assert q.drain(60) and gate.seen == [0, 1, 2, 3, 4] and q.pending == 0
    assert q.close(60)


def test_full_queue_drops_the_new_item_and_counts_it() -> None:
    gate = Gate()
    q: BackgroundQueue[int] = BackgroundQueue(gate, name="t-newest", maxsize=2)
    assert q.put(0) and gate.started.wait(60)  # 0 is being handled: the queue is empty
    assert q.put(1) and q.put(2)
    assert not q.put(3) and q.dropped == 1
    gate.release.set()
    assert q.drain(60) and gate.seen == [0, 1, 2]
    q.close(60)


def test_drop_oldest_keeps_the_newest_items() -> None:
    gate = Gate()
    q: BackgroundQueue[int] = BackgroundQueue(gate, name="t-oldest", maxsize=2, drop_oldest=True)
    assert q.put(0) and gate.started.wait(60)
    for i in (1, 2, 3, 4):
        assert q.put(i)
    assert q.dropped == 2
    gate.release.set()
    assert q.drain(60) and gate.seen == [0, 3, 4]
    q.close(60)


def test_a_failing_item_is_logged_and_the_next_one_is_handled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = Gate()
    gate.release.set()
    q: BackgroundQueue[int] = BackgroundQueue(gate, name="t-errors")
    with caplog.at_level(logging.ERROR, logger="relaunch.attribution.core.background"):
        q.put(-1)
        q.put(7)
        assert q.drain(60)
    assert gate.seen == [7]
    assert "t-errors: handling a queued item failed" in caplog.text
    assert "bad item -1" in caplog.text
    q.close(60)


def test_close_finishes_queued_items_then_refuses_new_ones() -> None:
    gate = Gate()
    q: BackgroundQueue[int] = BackgroundQueue(gate, name="t-close")
    q.put(1)
    q.put(2)
    gate.release.set()
    assert q.close(60) and gate.seen == [1, 2] and q.closed
    assert not q.put(3)
    with pytest.raises(RuntimeError, match="t-close: queue is closed"):
        q.put_wait(3)


def test_close_with_discard_drops_what_is_queued() -> None:
    gate = Gate()
    q: BackgroundQueue[int] = BackgroundQueue(gate, name="t-discard")
    q.put(1)
    assert gate.started.wait(60)
    q.put(2)
    q.put(3)
    assert not q.close(0, discard=True)  # 1 is still being handled
    gate.release.set()
    assert q.close(60) and gate.seen == [1]


def test_put_wait_blocks_while_full_until_an_item_is_taken() -> None:
    gate = Gate()
    q: BackgroundQueue[int] = BackgroundQueue(gate, name="t-wait", maxsize=1)
    q.put(0)
    assert gate.started.wait(60)
    q.put(1)  # the queue is full now
    done = threading.Event()

    def producer() -> None:
        q.put_wait(2)
        done.set()

    t = threading.Thread(target=producer)
    t.start()
    assert not done.is_set() and q.pending == 2  # blocked: 0 handled, 1 queued
    gate.release.set()
    assert done.wait(60)
    t.join(60)
    assert q.drain(60) and gate.seen == [0, 1, 2] and q.dropped == 0
    q.close(60)
