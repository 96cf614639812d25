"""Store operations of the barrier rendezvous per node per round, counted (issue 29).

Each simulated node (a thread with its own handler and its own TCPStore client, the real
store behind a counting proxy) joins round 0, then every node restarts into round 1. The
counts do not depend on timing: the leader's periodic evaluation is pushed past the test
(`POLL_S`), so a round closes on the arrival counters alone, and the only operations that
repeat with time are the waiters' polls, each one `check` of one key. What is asserted:
the work per node per round (every operation but those polls) is the same at 4, 16 and
64 nodes, and so is the cost of one leader evaluation and of one leader check.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta

import pytest
from torch.distributed import TCPStore
from torch.distributed.elastic.rendezvous import RendezvousParameters

from relaunch.launcher.rdzv import barrier as rdzv_barrier
from relaunch.launcher.rdzv.barrier import BarrierRendezvousHandler
from tests._rdzv_helpers import OPS_TAG, SECRET, CountingStore, is_poll

pytestmark = pytest.mark.timeout(600)

Log = list[tuple[int, str, str, str]]


def _cluster(n: int, log: Log, phase: dict[str, str]) -> list[BarrierRendezvousHandler]:
    server = TCPStore("127.0.0.1", 0, is_master=True, multi_tenant=True,
                      timeout=timedelta(seconds=60))  # fmt: skip
    handlers = []
    for i in range(n):
        params = RendezvousParameters("c10d", f"127.0.0.1:{server.port}", "ops", n, n,
                                      local_addr="127.0.0.1", last_call_timeout=120,
                                      keep_alive_interval=3600)  # fmt: skip
        client = TCPStore("127.0.0.1", server.port, is_master=False,
                          timeout=timedelta(seconds=60))  # fmt: skip
        h = BarrierRendezvousHandler(params, store=client, secret=SECRET, infra_rank=i)
        h.run.store = CountingStore(h.run.store, i, log, phase)  # type: ignore[assignment]
        handlers.append(h)
    handlers[0]._server = server  # type: ignore[attr-defined]  # kept alive with them
    return handlers


def _all_rendezvous(handlers: list[BarrierRendezvousHandler]) -> None:
    errors: list[BaseException] = []

    def node(h: BarrierRendezvousHandler) -> None:
        try:
            h.next_rendezvous()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=node, args=(h,), daemon=True) for h in handlers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors[0]
    assert not any(t.is_alive() for t in threads)


def _work(log: Log, phase: str, n: int) -> list[int]:
    """Operations per node in `phase`, polls left out (they repeat with time)."""
    counts = Counter(node for node, ph, op, key in log if ph == phase and not is_poll(op, key))
    return [counts[i] for i in range(n)]


def _measure(n: int) -> dict[str, object]:
    log: Log = []
    phase = {"now": "init"}
    handlers = _cluster(n, log, phase)
    try:
        phase["now"] = "round0"
        _all_rendezvous(handlers)
        phase["now"] = "round1"
        _all_rendezvous(handlers)
        # one periodic evaluation by the leader (nothing cached), then one keep-alive
        # watch by the leader (slot 0 of round 1) and by another node
        leader = next(h for h in handlers if h._beat == (1, 0))
        other = next(h for h in handlers if h._beat != (1, 0))
        leader._cache.clear()
        phase["now"] = "evaluate"
        leader._evaluate(1, {})
        for name, h in (("watch", leader), ("watch-other", other)):
            phase["now"] = name
            assert h._active is not None
            assert h._watch(1, h._active[1]) is False  # every node is alive
        polls = [(op, key) for _, ph, op, key in log if ph.startswith("round") and is_poll(op, key)]
        return {
            "round0": _work(log, "round0", n),
            "round1": _work(log, "round1", n),
            "evaluate": len([e for e in log if e[1] == "evaluate"]),
            "watch": len([e for e in log if e[1] == "watch"]),
            "watch-other": len([e for e in log if e[1] == "watch-other"]),
            "poll_ops": {op for op, _ in polls},
            "ops": {op for _, ph, op, _ in log if ph.startswith("round")},
            "log": list(log),
        }
    finally:
        for h in handlers:
            h.shutdown()


def test_store_operations_per_node_per_round_do_not_grow_with_the_node_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rdzv_barrier, "POLL_S", 3600.0)  # no periodic evaluation
    # group rank 0 alone reads the round's descriptors for the workers' store filter: counted
    # apart ("peers"), or the busiest node would depend on whether group rank 0 also closed
    # the round (timing)
    read_peers = BarrierRendezvousHandler._peer_addrs

    def tagged(self: BarrierRendezvousHandler, *a: object) -> object:
        OPS_TAG.now = "peers"
        try:
            return read_peers(self, *a)  # type: ignore[arg-type]
        finally:
            OPS_TAG.now = None

    monkeypatch.setattr(BarrierRendezvousHandler, "_peer_addrs", tagged)
    m = {n: _measure(n) for n in (4, 16, 64)}
    peers = {n: [(node, op) for node, ph, op, _ in m[n]["log"] if ph == "peers"] for n in m}  # type: ignore[union-attr]
    for n in m:  # one node per round (two rounds), the same few operations at every size
        assert len({node for node, _ in peers[n]}) <= 2 and peers[n], (n, peers[n])
    assert len(peers[64]) == len(peers[16]) == len(peers[4]) <= 2 * 3, peers
    for n, r in m.items():
        assert r["poll_ops"] <= {"check"}, r  # a poll is one check of one key
        for phase in ("round0", "round1"):
            counts = r[phase]
            assert isinstance(counts, list) and min(counts) > 0, (n, phase, counts)
    for phase in ("round0", "round1"):
        most = {n: max(m[n][phase]) for n in m}  # type: ignore[arg-type]
        usual = {n: Counter(m[n][phase]).most_common(1)[0][0] for n in m}  # type: ignore[arg-type]
        # flat: the busiest node (the one whose arrival closes the round) and the usual
        # node issue as many operations at 64 nodes as at 4
        assert most[64] == most[16] == most[4], (phase, most)
        assert usual[64] == usual[16] == usual[4], (phase, usual)
        assert most[64] <= 24, (phase, most)
    assert m[64]["evaluate"] == m[16]["evaluate"] == m[4]["evaluate"], {
        n: m[n]["evaluate"] for n in m
    }
    for what in ("watch", "watch-other"):
        assert m[64][what] == m[16][what] == m[4][what], {n: m[n][what] for n in m}
    # multi_get carries all descriptors and keep-alives in one operation
    assert "multi_get" in m[64]["ops"]  # type: ignore[operator]
