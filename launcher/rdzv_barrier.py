"""The barrier rendezvous (`--ft-rdzv-impl barrier`): torch's `RendezvousHandler` on a
c10d TCPStore, with round-scoped keys, round fencing, keep-alives and hot spares.

A round R gathers participants (`round/R/...`, layout in `launcher.rdzv_store`) until it
can close: MAX nodes alive, or the rank assignment (`launcher.rdzv_ranks.assign`) is
possible and the last-call window has passed since it first was. Any participant may
close it; `compare_set` on the round's result makes the first writer win, and everyone
reads the same assignment. A participant whose last keep-alive is older than the
keep-alive timeout, or that marked itself left, is not counted, so one that leaves
mid-rendezvous is dropped instead of blocking the barrier.

Active nodes return from `next_rendezvous` with their group rank; standbys (hot spares)
do not: they keep their reserved rank and wait for round R+1, which is opened (only) when
an active node of R comes back to the rendezvous (its workers failed), leaves it (failed
health check) or stops beating (launcher killed); a waiting standby that sees the last two
opens R+1 itself. Active nodes learn of R+1 through `num_nodes_waiting` and restart, so a
standby replaces a failed node without the scheduler; a standby that merely waits never
makes the active group restart. The rendezvous is closed (`closed` key) only by a
job-wide decision (`close_for_exit`); standbys then end with the job's outcome.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from torch.distributed import DistError, PrefixStore, Store
from torch.distributed.elastic.rendezvous import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousError,
    RendezvousHandler,
    RendezvousInfo,
    RendezvousParameters,
    RendezvousTimeoutError,
)

from relaunch.launcher.rdzv_ranks import Assignment, AssignmentError, Participant, assign
from relaunch.launcher.rdzv_store import Keys, cas, create_store, dumps, get_int, get_str, run_store
from relaunch.launcher.worker_store import WorkerStoreHost

POLL_S = 0.5  # longest a waiter sleeps between checks (closing wakes it at once)


@contextlib.contextmanager
def _store_lost(endpoint: str) -> Any:
    """A store operation that fails (its host died, the network went) becomes one
    `RendezvousConnectionError` with a one-line reason: the launcher reports it and exits
    (code 1) instead of dying with a C++ traceback."""
    try:
        yield
    except DistError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise RendezvousConnectionError(
            f"lost the rendezvous store at {endpoint} (its host ended or is unreachable): {first}"
        ) from None


class BarrierRendezvousHandler(RendezvousHandler):
    """See the module docstring; one instance per launcher, used by elastic's agent."""

    def __init__(
        self,
        params: RendezvousParameters,
        *,
        infra_rank: int | None = None,
        segment: int | None = None,
        segment_id: str | None = None,
        store: Store | None = None,
        hosting: bool = False,
    ) -> None:
        self._params = params
        self.min_nodes, self.max_nodes = params.min_nodes, params.max_nodes
        self.segment = segment
        self.last_call_s = float(params.get_as_int("last_call_timeout", 30) or 0)
        self.join_timeout_s = float(params.get_as_int("join_timeout", 600) or 600)
        self.keep_alive_s = float(params.get("keep_alive_interval", 5) or 5)
        self.keep_alive_timeout_s = self.keep_alive_s * int(
            params.get_as_int("keep_alive_max_attempt", 3) or 3
        )
        if store is None:
            store, hosting = create_store(params)
        self.hosting = hosting
        self._tcp = store
        self._s = run_store(store, params.run_id)
        addr = params.local_addr or socket.getfqdn()
        self._me = Participant(
            node_id=f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}",
            addr=addr,
            pid=os.getpid(),
            infra_rank=infra_rank,
            segment=segment_id,
        )
        self._was_active = False
        self._active: tuple[int, list[Assignment], dict[str, int]] | None = None
        self._beat: tuple[int, int] | None = None  # (round, slot) kept alive
        self._stop = threading.Event()
        self._peer_check_at = 0.0
        self.report: Callable[[str], None] = lambda text: None
        self.closed_reason: str | None = None
        self._acked = False
        self.warn: Callable[[str], None] = lambda text: None  # the agent's warning line
        self._workers_store = WorkerStoreHost(warn=lambda text: self.warn(text))
        cas(self._s, Keys.ROUND, "", "0")
        self._s.set(Keys.opened(0), "1")
        self._thread = threading.Thread(target=self._keep_alive, daemon=True, name="rdzv-ka")
        self._thread.start()
        atexit.register(self.shutdown)

    # -- RendezvousHandler --------------------------------------------------------
    def get_backend(self) -> str:
        return "c10d"

    @property
    def use_agent_store(self) -> bool:
        """True: the workers connect to the store this launcher hosts (`launcher.worker_store`)."""
        return self._workers_store.shared

    def get_run_id(self) -> str:
        return self._params.run_id

    def is_closed(self) -> bool:
        with _store_lost(self._params.endpoint):
            return get_str(self._s, Keys.CLOSED) is not None

    def set_closed(self, reason: str = "failed") -> None:
        cas(self._s, Keys.CLOSED, "", reason)

    def num_nodes_waiting(self) -> int:
        """1 when the next round was opened (an active node failed, left or died):
        elastic then restarts this node's workers. Standbys waiting count 0."""
        with _store_lost(self._params.endpoint):
            return self._num_nodes_waiting()

    def _num_nodes_waiting(self) -> int:
        active = self._active
        if active is None:
            return 0
        r, result, _ = active
        if self._s.check([Keys.opened(r + 1)]):
            return 1
        now = time.monotonic()
        if now >= self._peer_check_at:
            self._peer_check_at = now + self.keep_alive_s
            if self._dead_actives(r, result):
                self._open(r + 1)
                return 1
        return 0

    def shutdown(self) -> bool:
        """Stop the keep-alive thread (joined: never left inside a store call at exit)."""
        self._stop.set()
        self._workers_store.close()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.keep_alive_s + 5)
        return True

    def next_rendezvous(self) -> RendezvousInfo:
        with _store_lost(self._params.endpoint):
            return self._next_rendezvous()

    def _next_rendezvous(self) -> RendezvousInfo:
        deadline = time.monotonic() + self.join_timeout_s
        if self._active is not None:  # this node was active: its peers must restart too
            self._open(self._active[0] + 1)
            self._active = None
        while True:
            self._raise_if_closed()
            r, slot = self._join()
            result = self._wait_closed(r, slot, deadline)
            mine = next((a for a in result if a.node_id == self._me.node_id), None)
            if mine is None:  # joined after the round closed: the next one
                self._beat = None
                self._wait_next_round(r, result, deadline)
                continue
            if mine.active:
                self._was_active = True
                world = sum(1 for a in result if a.active)
                slots = self._slots(r, result)
                self._active = (r, result, slots)
                store = PrefixStore(Keys.store_prefix(r), self._s)
                info = self._workers_store.bootstrap(mine.group_rank, store, self._me.addr)
                self.report(
                    f"rendezvous round {r}: active, group rank {mine.group_rank} of {world}"
                    f" ({len(result) - world} standby)"
                )
                return RendezvousInfo(store, mine.group_rank, world, info)
            self._was_active = False
            self._workers_store.close()  # a former group rank 0 keeps no old store open
            self.report(
                f"rendezvous round {r}: standby (hot spare), reserved rank {mine.group_rank}; "
                "waiting for an active node to fail"
            )
            self._wait_next_round(r, result, None)

    # -- leaving ---------------------------------------------------------------------
    def leave_round(self) -> None:
        """Leave now (failed health check): marked left in the round this node is in, and
        the next round opened if it was active, so nobody waits for its keep-alive."""
        beat, self._beat = self._beat, None
        if beat is not None:
            self._s.set(Keys.left(*beat), "1")
        if self._active is not None:
            self._open(self._active[0] + 1)
            self._active = None
        self.shutdown()

    # -- internals -----------------------------------------------------------------
    def _raise_if_closed(self) -> None:
        reason = get_str(self._s, Keys.CLOSED)
        if reason is not None:
            self.closed_reason = reason
            self.acknowledge_close()
            raise RendezvousClosedError(f"the rendezvous was closed: job {reason}")

    def acknowledge_close(self) -> None:
        """Tell the store host this node saw the end (it waits for that before exiting)."""
        if not self._acked:
            self._acked = True
            self._s.set(Keys.ack(self._me.node_id), "1")

    def wait_for_acks(self, limit_s: float | None = None) -> int:
        """On the store host after the job ended: wait until every node of the last two
        rounds that has not left has seen the end (or stopped beating), so none loses the
        store before it learns the outcome. Bounded by the keep-alive timeout + 5 s.
        Returns how many nodes never answered."""
        deadline = time.monotonic() + (limit_s or self.keep_alive_timeout_s + 5)
        r = get_int(self._s, Keys.ROUND)
        waiting: dict[str, tuple[int, int]] = {}
        for rr in (r - 1, r):
            if rr < 0:
                continue
            for slot, p in self._participants(rr).items():
                if p.node_id != self._me.node_id and not self._s.check([Keys.left(rr, slot)]):
                    waiting[p.node_id] = (rr, slot)
        while waiting and time.monotonic() < deadline:
            for node_id, (rr, slot) in list(waiting.items()):
                if self._s.check([Keys.ack(node_id)]) or not self._alive(rr, slot):
                    del waiting[node_id]
            if waiting:
                time.sleep(0.05)
        return len(waiting)

    def _open(self, r: int) -> None:
        """Open round r (only from r-1: a node still on an older round cannot)."""
        now = cas(self._s, Keys.ROUND, str(r - 1), str(r))
        if now == str(r):
            self._s.set(Keys.opened(r), "1")

    def _join(self) -> tuple[int, int]:
        while True:
            r = get_int(self._s, Keys.ROUND)
            raw = get_str(self._s, Keys.result(r))
            if raw is None:
                break
            _nodes(raw)  # a round that failed fails a late node too (nobody opens r+1)
            # round r runs without us (a node the scheduler added or restarted): wait as a
            # hot spare, without a deadline, until r+1 opens
            self.report(f"rendezvous round {r} is running; waiting for the next round")
            self._wait_next_round(r, None, None)
        slot = self._s.add(Keys.count(r), 1) - 1
        desc = Participant(**{**asdict(self._me), "was_active": self._was_active})
        self._s.set(Keys.participant(r, slot), dumps(asdict(desc)))
        self._s.set(Keys.heartbeat(r, slot), repr(time.time()))
        self._beat = (r, slot)
        return r, slot

    def _participants(self, r: int) -> dict[int, Participant]:
        n = get_int(self._s, Keys.count(r))
        keys = [Keys.participant(r, i) for i in range(n)]
        if not keys:
            return {}
        if self._s.check(keys):  # the usual case: one round trip for all descriptors
            present = list(range(n))
        else:  # a slot taken, its descriptor not written yet
            present = [i for i, k in enumerate(keys) if self._s.check([k])]
        values = self._s.multi_get([keys[i] for i in present]) if present else []
        return {
            i: Participant(**json.loads(v.decode())) for i, v in zip(present, values, strict=True)
        }

    def _alive(self, r: int, slot: int) -> bool:
        """Not left, and its last keep-alive (wall-clock time, as torch's c10d rendezvous
        keeps them: clocks must agree within the keep-alive timeout) is recent."""
        if self._s.check([Keys.left(r, slot)]):
            return False
        beat = get_str(self._s, Keys.heartbeat(r, slot))
        return beat is not None and time.time() - float(beat) < self.keep_alive_timeout_s

    def _wait_closed(self, r: int, slot: int, deadline: float) -> list[Assignment]:
        last_call: float | None = None
        dup_since: float | None = None  # when this node first saw a duplicate infra rank
        while True:
            self._raise_if_closed()
            raw = get_str(self._s, Keys.result(r))
            if raw is not None:
                return _nodes(raw)
            if get_int(self._s, Keys.ROUND) != r:
                return []  # fenced: the round moved on without closing with us
            alive = [p for i, p in self._participants(r).items() if self._alive(r, i)]
            missing = self._missing_from_previous(r, {p.node_id for p in alive})
            now = time.monotonic()
            try:
                plan = assign(alive, self.min_nodes, self.segment)
                dup_since = None
            except AssignmentError as exc:
                # A killed launcher restarted by the scheduler has its old rank while the
                # dead incarnation still counts as alive: wait until that one's keep-alive
                # expires. A duplicate still alive then is real: the error becomes the
                # round's result, so every node fails alike.
                dup_since = dup_since if dup_since is not None else now
                if now - dup_since > self.keep_alive_timeout_s:
                    self._close(r, None, str(exc))
                    continue
                plan = None
            if plan is None:
                last_call = None
            else:
                last_call = last_call if last_call is not None else now + self.last_call_s
                if len(alive) >= self.max_nodes or not missing or now >= last_call:
                    self._close(r, plan)
                    continue
            if now > deadline:
                raise RendezvousTimeoutError(
                    f"round {r}: {len(alive)} node(s) alive after {self.join_timeout_s:g} s, "
                    f"{self.min_nodes} needed"
                )
            wait = POLL_S if last_call is None else max(0.01, min(POLL_S, last_call - now))
            self._wait_key(Keys.result(r), wait)

    def _missing_from_previous(self, r: int, joined: set[str]) -> int:
        """Nodes of round r-1 (active or standby) not in round r yet that are neither left
        nor silent: while there are none, round r need not wait for its last call. Round
        0 has no previous round: it waits for MAX nodes or its last call."""
        if r == 0:
            return 1
        raw = get_str(self._s, Keys.result(r - 1))
        if raw is None:
            return 1
        expected = {a["node_id"] for a in json.loads(raw).get("nodes", [])}
        missing = 0
        for slot, p in self._participants(r - 1).items():
            if p.node_id in expected and p.node_id not in joined and self._alive(r - 1, slot):
                missing += 1
        return missing

    def _close(self, r: int, plan: list[Assignment] | None, error: str | None = None) -> None:
        """Write round r's result (first writer wins): the plan, or the error that fails
        the round on every participant (duplicate infra ranks)."""
        if get_int(self._s, Keys.ROUND) != r:
            return
        body: dict[str, Any] = {"round": r, "nodes": [asdict(a) for a in plan or []]}
        if error is not None:
            body["error"] = error
        cas(self._s, Keys.result(r), "", dumps(body))

    def _slots(self, r: int, result: list[Assignment]) -> dict[str, int]:
        ids = {a.node_id for a in result if a.active}
        return {p.node_id: i for i, p in self._participants(r).items() if p.node_id in ids}

    def _dead_actives(self, r: int, result: list[Assignment] | None) -> bool:
        if not result:
            return False
        slots = self._slots(r, result)
        return any(not self._alive(r, s) for s in slots.values())

    def _wait_next_round(
        self, r: int, result: list[Assignment] | None, deadline: float | None
    ) -> None:
        """Wait until round r+1 is opened; open it when an active node of r died or left."""
        if result is None:
            raw = get_str(self._s, Keys.result(r))
            result = _nodes(raw) if raw else []
        while not self._s.check([Keys.opened(r + 1)]):
            self._raise_if_closed()
            if self._dead_actives(r, result):
                self.report(f"rendezvous round {r}: an active node left or stopped beating")
                self._open(r + 1)
                break
            if deadline is not None and time.monotonic() > deadline:
                raise RendezvousTimeoutError(f"round {r + 1} was not opened in time")
            self._wait_key(Keys.opened(r + 1), POLL_S)

    def _wait_key(self, key: str, seconds: float) -> None:
        """Until `key` exists or `seconds` passed: checks 5 ms apart, backing off to
        100 ms (the store's own timed wait logs a C++ warning at every timeout)."""
        end = time.monotonic() + seconds
        step = 0.005
        while not self._s.check([key]):
            left = end - time.monotonic()
            if left <= 0 or self._stop.is_set():
                return
            time.sleep(min(step, left))
            step = min(step * 2, 0.1)

    def _keep_alive(self) -> None:
        while not self._stop.wait(self.keep_alive_s):
            beat = self._beat
            if beat is None:
                continue
            try:
                self._s.set(Keys.heartbeat(*beat), repr(time.time()))
            except Exception:  # noqa: BLE001 - the store went away; the agent will see it
                return


def _nodes(raw: str) -> list[Assignment]:
    """The assignments of a closed round's result; RendezvousError when the round failed
    (the same one-line reason on every participant)."""
    data = json.loads(raw)
    if "error" in data:
        raise RendezvousError(f"round {data['round']}: {data['error']}")
    return [Assignment(**a) for a in data["nodes"]]


def on_exit(handler: Any, terminal: str | None) -> None:
    """What the launcher does with the rendezvous as it exits. A job-wide outcome
    (`terminal`) closes it; anything else (a failed health check, a signal, an exception
    local to this launcher: NVRx #421) leaves it open, this node marked as gone so the
    others go on without waiting for its keep-alive. The store host stays until the
    others have seen the end."""
    if terminal is not None:
        close_for_exit(handler, terminal)
        return
    if isinstance(handler, BarrierRendezvousHandler):
        if handler.closed_reason is not None and handler.hosting:
            handler.wait_for_acks()
        handler.leave_round()


def close_for_exit(handler: Any, reason: str) -> None:
    """Close the shared rendezvous for a job-wide decision (`succeeded`, `failed`: budget
    spent, `stopped`: STOP verdict acted on). Other handlers: their own shutdown."""
    if isinstance(handler, BarrierRendezvousHandler):
        handler.set_closed(reason)
        handler.acknowledge_close()
        if handler.hosting:
            handler.wait_for_acks()
        handler.shutdown()
    else:
        handler.shutdown()
