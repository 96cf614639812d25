"""Straggler reports across nodes through the rendezvous store (c10d TCPStore).

Each node's launcher publishes its ranks' summaries of report n under
`relaunch/strag/<cycle>/<n>/<node index>` in the store elastic already has for the round
(`worker_group.store`), waits (bounded) for the other nodes' keys of the same report, and
scores all ranks of the job together; it writes facts for its own ranks only, so each
straggler is named once, in its node's log. The store traffic runs on this module's
thread, never on the heartbeat thread nor in the training step, and only as short calls
(`set`, `check`, `get`: the agent shares the store client). A node whose report does not
arrive within `wait_s` is left out of that report; a store that fails turns the
exchange off for the rest of the cycle (scores fall back to this node's ranks).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from relaunch.attribution.core.background import BackgroundQueue

log = logging.getLogger(__name__)

_KEY = "relaunch/strag"
POLL_S = 0.05  # between checks of the other nodes' keys
Summaries = dict[int, dict[str, float]]


class StoreExchange:
    """Publish and collect report n of every node (blocking calls: use `ExchangeThread`)."""

    def __init__(self, store: Any, cycle: int, node_index: int, nodes: int, wait_s: float) -> None:
        self.store = store
        self.cycle = int(cycle)
        self.node_index = int(node_index)
        self.nodes = int(nodes)
        self.wait_s = float(wait_s)

    def _key(self, n: int, node: int) -> str:
        return f"{_KEY}/{self.cycle}/{n}/{node}"

    def publish(self, n: int, summaries: Summaries) -> None:
        body = {str(r): secs for r, secs in summaries.items()}
        self.store.set(self._key(n, self.node_index), json.dumps(body))
        if n > 3:  # the others have read (or given up on) our older reports by now
            with contextlib.suppress(Exception):  # deleting is housekeeping only
                self.store.delete_key(self._key(n - 3, self.node_index))

    def collect(self, n: int, stop: threading.Event | None = None) -> Summaries:
        """Every node's summaries of report n that arrived within `wait_s`.

        Polls with `check` (short calls) instead of a blocking `wait`: the agent shares
        the store client, and a blocking wait would hold it for the whole wait."""
        keys = [self._key(n, k) for k in range(self.nodes)]
        stop = stop or threading.Event()
        deadline = time.monotonic() + self.wait_s
        present: set[str] = set()
        while True:
            present |= {k for k in keys if k not in present and self.store.check([k])}
            if len(present) == len(keys) or time.monotonic() >= deadline:
                break
            if stop.wait(POLL_S):
                break
        out: Summaries = {}
        for key in keys:
            if key not in present:
                continue
            try:
                body = json.loads(self.store.get(key))
            except ValueError:
                continue
            if not isinstance(body, dict):
                continue
            for r, secs in body.items():
                if isinstance(r, str) and r.isdigit() and isinstance(secs, dict):
                    out[int(r)] = {
                        str(k): float(v)
                        for k, v in secs.items()
                        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                    }
        return out


class ExchangeThread:
    """Runs the exchange of each local report in order and hands the merged report to
    `score(n, summaries)`, on a `BackgroundQueue`. `submit` never blocks; `close` stops
    after what is queued, waiting at most `timeout` seconds."""

    def __init__(self, exchange: StoreExchange, score: Callable[[int, Summaries], None]) -> None:
        self.exchange = exchange
        self._score = score
        self._stop = threading.Event()
        self.failed: str | None = None
        self._queue: BackgroundQueue[tuple[int, Summaries]] = BackgroundQueue(
            self._exchange_and_score, name="relaunch-straggler"
        )

    def submit(self, n: int, summaries: Summaries) -> None:
        self._queue.put((n, summaries))

    def _exchange_and_score(self, item: tuple[int, Summaries]) -> None:
        n, local = item
        merged = dict(local)
        if self.failed is None:
            try:
                self.exchange.publish(n, local)
                merged = {**self.exchange.collect(n, self._stop), **local}
            except Exception as exc:  # noqa: BLE001 - the store went away: per node
                self.failed = str(exc) or type(exc).__name__
                log.warning("straggler exchange through the store off: %s", self.failed)
        try:
            self._score(n, merged)
        except Exception:  # logged here with what failed
            log.exception("straggler scoring failed")

    def close(self, timeout: float) -> None:
        """Finish what is queued, waiting for the other nodes at most `timeout` s more."""
        if not self._queue.close(timeout):
            self._stop.set()  # what is left scores with the nodes that reported
            self._queue.close(timeout)
        self._stop.set()
