"""The barrier rendezvous handler on a real c10d TCPStore, several handlers in one process
(one per simulated node, each in its own thread): closing, keep-alives, leaving, round
fencing, standbys, num_nodes_waiting, closing the job. No timing decides an outcome: a
node that died is simulated by a keep-alive far in the past, never by waiting."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from torch.distributed import TCPStore
from torch.distributed.elastic.rendezvous import (
    RendezvousClosedError,
    RendezvousError,
    RendezvousParameters,
)

from relaunch.launcher.rdzv.barrier import BarrierRendezvousHandler, close_for_exit
from relaunch.launcher.rdzv.store import Keys, RunStore
from tests._rdzv_helpers import SECRET, ghost_join

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server() -> Iterator[TCPStore]:
    store = TCPStore("127.0.0.1", 0, is_master=True, multi_tenant=True,
                     timeout=timedelta(seconds=30))  # fmt: skip
    yield store


class Cluster:
    def __init__(self, server: TCPStore, lo: int, hi: int, **conf: object) -> None:
        self.port = server.port
        self.lo, self.hi, self.conf = lo, hi, {"last_call_timeout": 120, **conf}
        self.handlers: list[BarrierRendezvousHandler] = []
        self.results: dict[int, object] = {}
        self.threads: list[threading.Thread] = []
        self.view = RunStore(server, "t", SECRET)

    def handler(self, **kw: object) -> BarrierRendezvousHandler:
        params = RendezvousParameters("c10d", f"127.0.0.1:{self.port}", "t", self.lo, self.hi,
                                      local_addr="127.0.0.1", **self.conf)  # fmt: skip
        client = TCPStore("127.0.0.1", self.port, is_master=False, timeout=timedelta(seconds=30))
        h = BarrierRendezvousHandler(params, store=client, secret=SECRET, **kw)  # type: ignore[arg-type]
        self.handlers.append(h)
        return h

    def join(self, h: BarrierRendezvousHandler) -> threading.Thread:
        i = self.handlers.index(h)

        def run() -> None:
            try:
                self.results[i] = h.next_rendezvous()
            except Exception as exc:  # noqa: BLE001 - the test inspects it
                self.results[i] = exc

        t = threading.Thread(target=run, daemon=True)
        t.start()
        self.threads.append(t)
        return t

    def close(self) -> None:
        for h in self.handlers:
            h.shutdown()


def ghost(view: RunStore, r: int, node_id: str, *, beat: float, left: bool = False) -> int:
    """A participant written straight into round r: a launcher that joined, then died
    (keep-alive far in the past) or left. Returns its slot."""
    return ghost_join(view, r, node_id, beat=beat, left=left)


def test_a_round_closes_when_max_nodes_joined_with_ranks_by_infra_rank(server) -> None:  # type: ignore[no-untyped-def]
    c = Cluster(server, 4, 4)
    try:
        hs = [c.handler(infra_rank=10 - i) for i in range(4)]
        for t in [c.join(h) for h in hs]:
            t.join(60)
        ranks = {i: (c.results[i].rank, c.results[i].world_size) for i in range(4)}
        assert ranks == {0: (3, 4), 1: (2, 4), 2: (1, 4), 3: (0, 4)}
        c.results[0].store.set("x", "round0")  # the round's store is scoped to the round
        assert c.view.store.get("round/0/store/x") == b"round0"
    finally:
        c.close()


@pytest.mark.parametrize("how", ["stale keep-alive", "left"])
def test_a_participant_gone_mid_rendezvous_does_not_block_or_join(server, how) -> None:  # type: ignore[no-untyped-def]
    # MIN 2, MAX 3, no last-call window: the round closes as soon as it can
    c = Cluster(server, 2, 3, last_call_timeout=0)
    try:
        a = c.handler()
        if how == "left":
            g = ghost(c.view, 0, "gone", beat=time.time() + 3600, left=True)
        else:
            g = ghost(c.view, 0, "gone", beat=time.time() - 3600)
        b = c.handler()
        for t in [c.join(a), c.join(b)]:
            t.join(60)
        result = c.view.read(Keys.result(0))
        assert result is not None
        ranks = json.loads(result)["ranks"]  # each slot's group rank, -1: not in the round
        assert len(ranks) == 3 and ranks[g] == -1 and sorted(ranks) == [-1, 0, 1], ranks
        assert sorted(c.results[i].rank for i in (0, 1)) == [0, 1]
        assert {c.results[i].world_size for i in (0, 1)} == {2}
    finally:
        c.close()


def test_standby_waits_and_does_not_restart_the_active_group(server) -> None:  # type: ignore[no-untyped-def]
    c = Cluster(server, 2, 3)
    try:
        a, b, s = c.handler(infra_rank=0), c.handler(infra_rank=1), c.handler(infra_rank=2)
        ta, tb, ts = c.join(a), c.join(b), c.join(s)
        ta.join(60)
        tb.join(60)
        assert (c.results[0].rank, c.results[1].rank) == (0, 1)
        assert ts.is_alive() and 2 not in c.results  # the standby did not return
        assert a.num_nodes_waiting() == 0 and b.num_nodes_waiting() == 0
        # b leaves (failed health check): the next round opens, a must restart
        b.leave_round()
        assert a.num_nodes_waiting() == 1
        ta = c.join(a)  # a restarts: round 1 = a (returning) + the standby
        ta.join(60)
        ts.join(60)
        assert (c.results[0].rank, c.results[2].rank) == (0, 1)
        assert c.view.read_int(Keys.ROUND) == 1
    finally:
        c.close()


def test_stale_writes_of_an_earlier_round_cannot_change_the_current_one(server) -> None:  # type: ignore[no-untyped-def]
    c = Cluster(server, 2, 2)
    try:
        a, b, old = c.handler(infra_rank=0), c.handler(infra_rank=1), c.handler(infra_rank=5)
        for t in [c.join(a), c.join(b)]:
            t.join(60)
        for t in [c.join(a), c.join(b)]:  # both restart: round 1
            t.join(60)
        r0, r1 = c.view.read(Keys.result(0)), c.view.read(Keys.result(1))
        assert c.view.read_int(Keys.ROUND) == 1 and r0 and r1
        # a node still acting on round 0 (it was active there, then stalled)
        old._open(1)  # opening "the next round" from 0: round 1 is already open
        old._close(0, [])  # closing round 0 again: fenced (round is 1; result exists)
        old._close(1, [])  # closing round 1 again: the first result stays
        assert c.view.read_int(Keys.ROUND) == 1
        assert (c.view.read(Keys.result(0)), c.view.read(Keys.result(1))) == (r0, r1)
    finally:
        c.close()


def test_duplicate_infra_ranks_fail_the_rendezvous_clearly(server) -> None:  # type: ignore[no-untyped-def]
    c = Cluster(server, 2, 2)
    try:
        hs = [c.handler(infra_rank=3), c.handler(infra_rank=3)]
        for t in [c.join(h) for h in hs]:
            t.join(60)
        for i in (0, 1):
            assert isinstance(c.results[i], RendezvousError)
            assert "duplicate infra group rank 3" in str(c.results[i])
    finally:
        c.close()


def test_closing_the_job_ends_the_standbys_with_its_outcome(server) -> None:  # type: ignore[no-untyped-def]
    c = Cluster(server, 1, 2)
    try:
        a, s = c.handler(infra_rank=0), c.handler(infra_rank=1)
        ta, ts = c.join(a), c.join(s)
        ta.join(60)
        assert c.results[0].world_size == 1 and ts.is_alive()
        close_for_exit(a, "succeeded")
        ts.join(60)
        assert isinstance(c.results[1], RendezvousClosedError)
        assert s.closed_reason == "succeeded" and a.is_closed()
    finally:
        c.close()


@pytest.mark.parametrize(
    ("reason", "stops"), [("failed", True), ("stopped", True), ("succeeded", False)]
)
def test_an_active_node_learns_the_jobs_end_while_its_workers_run(
    server, reason: str, stops: bool
) -> None:  # type: ignore[no-untyped-def]
    """The job ended on another node (its budget spent, a STOP): the active peer's monitor
    sees it (num_nodes_waiting 1: elastic stops its workers) and its next rendezvous says
    closed, acknowledged to the store host, instead of finding the store gone later. A
    success closed elsewhere never stops workers that may still be finishing."""
    c = Cluster(server, 2, 2)
    try:
        a, b = c.handler(infra_rank=0), c.handler(infra_rank=1)
        for t in [c.join(a), c.join(b)]:
            t.join(60)
        assert b.num_nodes_waiting() == 0
        a.set_closed(reason)
        assert b.num_nodes_waiting() == (1 if stops else 0)
        tb = c.join(b)
        tb.join(60)
        assert isinstance(c.results[1], RendezvousClosedError)
        assert b.closed_reason == (
            reason if stops else "succeeded on other nodes; this node's workers did not"
        )
        assert a.wait_for_acks(limit_s=5) == 0  # b acknowledged: the host may go
    finally:
        c.close()


def test_a_node_arriving_while_the_job_runs_waits_as_a_spare(server) -> None:  # type: ignore[no-untyped-def]
    c = Cluster(server, 2, 3, last_call_timeout=0)
    try:
        a, b = c.handler(infra_rank=0), c.handler(infra_rank=1)
        for t in [c.join(a), c.join(b)]:
            t.join(60)
        late = c.handler(infra_rank=2)  # the scheduler's replacement, after round 0 closed
        tl = c.join(late)
        assert a.num_nodes_waiting() == 0  # it does not make the active group restart
        assert c.view.add(Keys.count(0), 0) == 2  # and it is not counted in round 0
        b.leave_round()
        ta = c.join(a)
        ta.join(60)
        tl.join(60)
        assert (c.results[0].rank, c.results[2].rank, c.results[2].world_size) == (0, 1, 2)
    finally:
        c.close()


def test_an_active_node_never_takes_the_jobs_success_as_its_own(server) -> None:  # type: ignore[no-untyped-def]
    """A node that ran workers and comes back to the rendezvous (they failed) finds the
    job closed as succeeded: its own outcome is not success (issue 26). A standby's is."""
    c = Cluster(server, 1, 2)
    try:
        a, s = c.handler(infra_rank=0), c.handler(infra_rank=1)
        ta, ts = c.join(a), c.join(s)
        ta.join(60)
        c.view.cas(Keys.CLOSED, "", "succeeded")  # closed elsewhere, signed
        c.view.write(Keys.end(0), "1")
        ts.join(60)
        assert s.closed_reason == "succeeded"
        with pytest.raises(RendezvousClosedError):
            a.next_rendezvous()
        assert a.closed_reason is not None and a.closed_reason != "succeeded"
    finally:
        c.close()
