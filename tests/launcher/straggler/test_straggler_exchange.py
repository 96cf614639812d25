"""Straggler reports across nodes through a real c10d TCPStore on 127.0.0.1: two node
scorers with one rank each (nothing to compare on either node alone) score their ranks
together; only the slow rank's own node names it."""

from __future__ import annotations

import json
import socket
from datetime import timedelta

from torch.distributed import TCPStore

from relaunch.launcher.straggler.exchange import StoreExchange
from relaunch.launcher.straggler.scores import StragglerScorer

MS = 1_000_000


def _store() -> TCPStore:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return TCPStore("127.0.0.1", port, 1, True, timedelta(seconds=30))


def _client(server: TCPStore) -> TCPStore:
    """Another node's connection to the same store."""
    return TCPStore("127.0.0.1", server.port, 1, False, timedelta(seconds=30))


def test_two_nodes_score_their_ranks_together_and_each_names_its_own() -> None:
    store = _store()
    clients = {0: store, 1: _client(store)}
    out: dict[int, list[str]] = {0: [], 1: []}
    scorers = {
        k: StragglerScorer(
            0, k, [k], 0.7, out[k].append, exchange=StoreExchange(clients[k], 0, k, 2, 30.0)
        )
        for k in (0, 1)
    }
    for n in range(1, 5):
        for k, sc in scorers.items():
            med = (100 if k == 1 else 20) * MS
            sc.add(k, n, {"fwd": [3, med, med, 3 * med]})
    for sc in scorers.values():
        sc.close(timeout=30.0)  # waits for the queued reports, not for a timer
    assert out[0] == []  # node 0's rank is fine; node 1's rank is node 1's to name
    named = [json.loads(line[len("fact: ") :]) for line in out[1]]
    assert [(f["rank"], f["node"], f["reports"]) for f in named] == [(1, 1, 2), (1, 1, 4)]
    assert named[0]["relative"] == 0.6  # median of 20 and 100 ms = 60 ms, / 100 ms
    summary = json.loads(scorers[1].summary_fact()[len("fact: ") :])
    assert list(summary["ranks"]) == ["1"] and summary["reports"] == 4
    assert list(json.loads(scorers[0].summary_fact()[len("fact: ") :])["ranks"]) == ["0"]


def test_a_node_that_never_reports_is_left_out_after_the_wait() -> None:
    store = _store()
    lines: list[str] = []
    sc = StragglerScorer(
        0, 0, [0, 1], 0.7, lines.append, exchange=StoreExchange(store, 0, 0, 2, 0.2)
    )
    for n in range(1, 3):
        sc.add(0, n, {"fwd": [3, 20 * MS, 20 * MS, 60 * MS]})
        sc.add(1, n, {"fwd": [3, 100 * MS, 100 * MS, 300 * MS]})
    sc.close(timeout=30.0)
    assert sc.reports == 2  # scored with this node's two ranks once node 1 did not answer
    assert [json.loads(x[len("fact: ") :])["rank"] for x in lines] == [1]


class _BrokenStore:
    def set(self, key: str, value: str) -> None:
        raise RuntimeError("store gone")


def test_a_failing_store_falls_back_to_this_nodes_ranks() -> None:
    lines: list[str] = []
    sc = StragglerScorer(
        0, 0, [0, 1], 0.7, lines.append, exchange=StoreExchange(_BrokenStore(), 0, 0, 2, 1.0)
    )
    for n in range(1, 3):
        sc.add(0, n, {"fwd": [3, 20 * MS, 20 * MS, 60 * MS]})
        sc.add(1, n, {"fwd": [3, 100 * MS, 100 * MS, 300 * MS]})
    sc.close(timeout=30.0)
    assert sc._exchange is not None and sc._exchange.failed == "store gone"
    assert sc.reports == 2 and len(lines) == 1
