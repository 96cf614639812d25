"""The barrier rendezvous (`--ft-rdzv-impl barrier`): torch's `RendezvousHandler` on a
c10d TCPStore, with round-scoped keys, round fencing, keep-alives and hot spares.

A round R gathers participants (`round/R/...`, layout in `launcher.rdzv.store`) until it
can close: MAX nodes alive, or the rank assignment (`launcher.rdzv.assignment.assign`) is
possible and the last-call window has passed since it first was (or every node of R-1
that is still alive is back). Any participant may close it; `compare_set` on the round's
result makes the first writer win, and everyone reads the same assignment. A participant
whose last keep-alive is older than the keep-alive timeout, or that marked itself left, is
not counted, so one that leaves mid-rendezvous is dropped instead of blocking the barrier.

Store work per node is constant, whatever the node count (issue 29): a node joins with a
fixed number of operations (a slot from an `add`, its descriptor and keep-alive, an `add`
to the arrival counter), and then polls one key (`round/R/decided`) with a backoff. The
full evaluation (every descriptor and keep-alive in one `multi_get`) is made by the node
whose arrival may complete the round (the counters say so) and, periodically, by the
round's leader only (slot 0 unless it died: `round/R/lead`); the others check just the
leader's keep-alive, once per keep-alive interval, and take its place when it is gone.
While a round runs, the leader alone watches the active nodes' keep-alives.

Active nodes return from `next_rendezvous` with their group rank; standbys (hot spares)
do not: they keep their reserved rank and wait for round R+1, which is opened (only) when
an active node of R comes back to the rendezvous (its workers failed), leaves it (failed
health check) or stops beating (launcher killed; seen by the leader). Active nodes learn
of R+1 through `num_nodes_waiting` and restart, so a standby replaces a failed node
without the scheduler; a standby that merely waits never makes the active group restart.
The rendezvous is closed (`closed` key, signed) only by a job-wide decision
(`close_for_exit`); standbys then end with the job's outcome.
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
from dataclasses import asdict, dataclass
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

from relaunch.launcher.rdzv.assignment import Assignment, AssignmentError, Participant, assign
from relaunch.launcher.rdzv.auth import ForgedValue
from relaunch.launcher.rdzv.store import (
    LEFT,
    Keys,
    RunStore,
    create_store,
    dumps,
    is_loopback_name,
)
from relaunch.launcher.rdzv.worker_store import WorkerStoreHost

POLL_S = 0.5  # the leader's evaluation interval while a round gathers
POLL_MIN_S = 0.005  # first wait between two polls of a wake key (doubling from there)
POLLS_PER_S = 10_000  # the poll backoff's cap keeps all nodes' polls under this rate


@contextlib.contextmanager
def _store_lost(endpoint: str) -> Any:
    """A store operation that fails (its host died, the network went) becomes one
    `RendezvousConnectionError` with a one-line reason: the launcher reports it and exits
    (code 1) instead of dying with a C++ traceback. A forged value is one too."""
    try:
        yield
    except DistError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise RendezvousConnectionError(
            f"lost the rendezvous store at {endpoint} (its host ended or is unreachable): {first}"
        ) from None
    except ForgedValue as exc:
        raise RendezvousConnectionError(f"rendezvous store at {endpoint}: {exc}") from None


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
        secret: bytes | None = None,
    ) -> None:
        from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

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
        self.run = RunStore(store, params.run_id, secret)
        self._s = self.run
        host = parse_rendezvous_endpoint(params.endpoint, default_port=29400)[0]
        # the workers' store binds where the job's nodes meet: loopback for a job on one
        # machine, else this node's address
        addr = params.local_addr or ("127.0.0.1" if is_loopback_name(host) else socket.getfqdn())
        self._me = Participant(
            node_id=f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}",
            addr=addr,
            pid=os.getpid(),
            infra_rank=infra_rank,
            segment=segment_id,
        )
        self._was_active = False
        self._active: tuple[int, Closed] | None = None
        self._beat: tuple[int, int] | None = None  # (round, slot) kept alive
        self._stop = threading.Event()
        self._peer_check_at = 0.0
        self._cache: dict[tuple[str, int], Any] = {}  # per-round facts that never change
        self.report: Callable[[str], None] = lambda text: None
        self.closed_reason: str | None = None
        self._acked = False
        self._warned = False
        self.warn: Callable[[str], None] = lambda text: None  # the agent's warning line
        self._workers_store = WorkerStoreHost(warn=lambda text: self.warn(text))
        self._s.cas(Keys.ROUND, "", "0")
        self._thread = threading.Thread(target=self._keep_alive, daemon=True, name="rdzv-ka")
        self._thread.start()
        atexit.register(self.shutdown)

    # -- RendezvousHandler --------------------------------------------------------
    def get_backend(self) -> str:
        return "c10d"

    @property
    def use_agent_store(self) -> bool:
        """True: the workers connect to the store this launcher hosts (`launcher.rdzv.worker_store`)."""
        return self._workers_store.shared

    def get_run_id(self) -> str:
        return self._params.run_id

    def is_closed(self) -> bool:
        with _store_lost(self._params.endpoint):
            return self._closed() is not None

    def _closed(self) -> str | None:
        """The job's outcome when the rendezvous was closed (a signed value: one written
        without the job's secret is refused, never taken as the outcome)."""
        return self._s.read(Keys.CLOSED)

    def set_closed(self, reason: str = "failed") -> None:
        with _store_lost(self._params.endpoint):
            self._s.cas(Keys.CLOSED, "", reason)
            r = self._round()
            self._s.write_many({Keys.decided(r): "1", Keys.end(r): "1"})

    def num_nodes_waiting(self) -> int:
        """1 when the next round was opened (an active node failed, left or died):
        elastic then restarts this node's workers. Standbys waiting count 0."""
        with _store_lost(self._params.endpoint):
            return self._num_nodes_waiting()

    def _num_nodes_waiting(self) -> int:
        active = self._active
        if active is None:
            return 0
        r, result = active
        if self._s.exists(Keys.end(r)):
            if self._s.exists(Keys.opened(r + 1)):
                return 1
            # the job ended on another node (budget spent, a STOP): stop this node's
            # workers now and learn the end in the next rendezvous, while the store host
            # still waits for this node's acknowledgement (not after it went: exit 6).
            # A success closed elsewhere never stops workers that may still be finishing.
            reason = self._closed()
            return 1 if reason is not None and reason != "succeeded" else 0
        now = time.monotonic()
        if now >= self._peer_check_at:
            self._peer_check_at = now + self.keep_alive_s
            if self._watch(r, result):
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
        if self._s.secret is None and not self._warned:
            self._warned = True
            self.warn(
                "the rendezvous store is not authenticated (no --ft-job-secret-file, no "
                "RELAUNCH_JOB_SECRET): anyone who reaches its port can change this job"
            )
        deadline = time.monotonic() + self.join_timeout_s
        if self._active is not None:  # this node was active: its peers must restart too
            self._open(self._active[0] + 1)
            self._active = None
        while True:
            self._raise_if_closed()
            r, slot = self._join()
            result = self._wait_closed(r, slot, deadline)
            mine = result.assignment(slot) if result is not None else None
            if mine is None:  # joined after the round closed: the next one
                self._beat = None
                self._wait_next_round(r, result, deadline)
                continue
            if mine.active:
                self._was_active = True
                assert result is not None
                world = result.world
                self._active = (r, result)
                self._peer_check_at = time.monotonic() + self.keep_alive_s
                store = PrefixStore(
                    f"{self._s.prefix}/{Keys.store_prefix(r)}", self._tcp
                )  # the round's store for elastic and the workers' bootstrap
                # only group rank 0 hosts the workers' store and filters who may reach it:
                # the others never read every node's descriptor (O(nodes) bytes each)
                peers = self._peer_addrs(r, result) if mine.group_rank == 0 else None
                info = self._workers_store.bootstrap(mine.group_rank, store, self._me.addr, peers)
                self.report(
                    f"rendezvous round {r}: active, group rank {mine.group_rank} of {world}"
                    f" ({result.size - world} standby)"
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
            self._s.write(Keys.heartbeat(*beat), LEFT)
            self._s.add(Keys.gone(beat[0]), 1)
        if self._active is not None:
            self._open(self._active[0] + 1)
            self._active = None
        self.shutdown()

    # -- internals -----------------------------------------------------------------
    def _round(self) -> int:
        return int(self._s.get(Keys.ROUND))

    def closed_reason_now(self) -> str | None:
        """The closed value now (one store read), None while the job runs."""
        with _store_lost(self._params.endpoint):
            return self._closed()

    def raise_if_closed(self) -> None:
        """RendezvousClosedError (after acknowledging it) when the job was closed."""
        with _store_lost(self._params.endpoint):
            self._raise_if_closed()

    def _raise_if_closed(self) -> None:
        reason = self._closed()
        if reason is not None:
            # A node back from a round it was active in (its workers failed or were
            # stopped) never takes the job's success as its own outcome: its exit follows
            # from its own workers. A standby's outcome is the job's (a signed value).
            if reason == "succeeded" and self._was_active:
                reason = "succeeded on other nodes; this node's workers did not"
            self.closed_reason = reason
            self.acknowledge_close()
            raise RendezvousClosedError(f"the rendezvous was closed: job {reason}")

    def acknowledge_close(self) -> None:
        """Tell the store host this node saw the end (it waits for that before exiting)."""
        if not self._acked:
            self._acked = True
            self._s.append(Keys.ACKS, self._me.node_id + "\n")

    def wait_for_acks(self, limit_s: float | None = None) -> int:
        """On the store host after the job ended: wait until every node of the last two
        rounds that has not left has seen the end (or stopped beating), so none loses the
        store before it learns the outcome. Bounded by the keep-alive timeout + 5 s; two
        store operations per poll. Returns how many nodes never answered."""
        deadline = time.monotonic() + (limit_s or self.keep_alive_timeout_s + 5)
        r = self._round()
        waiting: dict[str, tuple[int, int]] = {}
        for rr in (r - 1, r):
            if rr >= 0:
                for slot, p in self._participants(rr).items():
                    if p.node_id != self._me.node_id:
                        waiting[p.node_id] = (rr, slot)
        step = POLL_MIN_S
        while waiting and time.monotonic() < deadline:
            acked = set((self._s.raw_get(Keys.ACKS) or "").split("\n"))
            ids = [n for n in waiting if n not in acked]
            beats = self._beats([waiting[n] for n in ids])
            waiting = {n: waiting[n] for n, b in zip(ids, beats, strict=True) if self._fresh(b)}
            if waiting:
                time.sleep(step)
                step = min(step * 2, 0.1)
        return len(waiting)

    def _open(self, r: int) -> None:
        """Open round r (only from r-1: a node still on an older round cannot) and wake
        round r-1's waiters."""
        now = self._s.cas(Keys.ROUND, str(r - 1), str(r))
        if now == str(r):
            self._s.write_many(
                {Keys.opened(r): "1", Keys.end(r - 1): "1", Keys.decided(r - 1): "1"}
            )

    def _join(self) -> tuple[int, int]:
        while True:
            r = self._round()
            raw = self._s.read(Keys.result(r))
            if raw is None:
                break
            _nodes(raw)  # a round that failed fails a late node too (nobody opens r+1)
            # round r runs without us (a node the scheduler added or restarted): wait as a
            # hot spare, without a deadline, until r+1 opens
            self.report(f"rendezvous round {r} is running; waiting for the next round")
            self._wait_next_round(r, _nodes(raw), None)
            self._raise_if_closed()
        slot = self._s.add(Keys.count(r), 1) - 1
        desc = Participant(**{**asdict(self._me), "was_active": self._was_active})
        self._s.write_many(
            {Keys.participant(r, slot): dumps(asdict(desc)), Keys.heartbeat(r, slot): _now()}
        )
        self._beat = (r, slot)
        arrived = self._s.add(Keys.arrived(r), 1)
        if self._may_complete(r, arrived):
            self._evaluate(r, {}, arrival=arrived)
        return r, slot

    def _may_complete(self, r: int, arrived: int) -> bool:
        """Whether `arrived` nodes might let round r close now (counters only: MAX, or as
        many as round r-1 had minus those that left it); the full evaluation decides."""
        if arrived >= self.max_nodes:
            return True
        if r == 0 or arrived < self.min_nodes:
            return False
        size = self._s.read_int(Keys.size(r - 1), 0)
        return arrived >= size - self._s.add(Keys.gone(r - 1), 0)

    def _participants(self, r: int, *, known: int | None = None) -> dict[int, Participant]:
        """Round r's participants by slot: one `multi_get` when every slot taken has its
        descriptor (arrivals == slots); else, as a fallback, a check per slot."""
        arrived = self._s.add(Keys.arrived(r), 0) if known is None else known
        n = self._s.add(Keys.count(r), 0)
        if n == 0:
            return {}
        keys = [Keys.participant(r, i) for i in range(n)]
        if arrived == n:
            present = list(range(n))
        else:  # a slot taken, its descriptor not written yet (or never: died in between)
            present = [i for i, k in enumerate(keys) if self._s.exists(k)]
        values = self._s.get_many([keys[i] for i in present])
        return {i: Participant(**json.loads(v)) for i, v in zip(present, values, strict=True)}

    def _peer_addrs(self, r: int, result: Closed) -> list[str] | None:
        """The addresses of round r's active nodes (their signed descriptors), which alone
        may reach the workers' store; None (no filter) when the store is not
        authenticated (no job secret: a descriptor could be anyone's)."""
        if self._s.secret is None:
            return None
        slots = set(result.active_slots())
        return [p.addr for i, p in self._participants(r).items() if i in slots]

    def _beats(self, slots: list[tuple[int, int]]) -> list[str]:
        return self._s.get_many([Keys.heartbeat(r, i) for r, i in slots])

    def _fresh(self, beat: str) -> bool:
        """Not left, and the keep-alive (wall-clock time, as torch's c10d rendezvous keeps
        them: clocks must agree within the keep-alive timeout) is recent."""
        return beat != LEFT and time.time() - float(beat) < self.keep_alive_timeout_s

    def _alive_participants(self, r: int, arrival: int | None) -> dict[int, Participant]:
        parts = self._participants(r, known=arrival)
        beats = self._beats([(r, i) for i in parts])
        return {i: p for (i, p), b in zip(parts.items(), beats, strict=True) if self._fresh(b)}

    def _evaluate(self, r: int, state: dict[str, Any], arrival: int | None = None) -> None:
        """Close round r when it can close now (a constant number of store operations:
        the descriptors and keep-alives of all participants come in two `multi_get`s).
        `state` keeps the last-call and duplicate timers between a leader's evaluations."""
        by_slot = self._alive_participants(r, arrival)
        alive = list(by_slot.values())
        slots = {p.node_id: i for i, p in by_slot.items()}
        missing = self._missing_from_previous(r, set(slots))
        now = time.monotonic()
        try:
            plan = assign(alive, self.min_nodes, self.segment)
            state.pop("dup_since", None)
        except AssignmentError as exc:
            # A killed launcher restarted by the scheduler has its old rank while the
            # dead incarnation still counts as alive: wait until that one's keep-alive
            # expires. A duplicate still alive then is real: the error becomes the
            # round's result, so every node fails alike.
            since = state.setdefault("dup_since", now)
            if now - since > self.keep_alive_timeout_s:
                self._close(r, None, error=str(exc))
            return
        if plan is None:
            state.pop("last_call", None)
            return
        last_call = state.setdefault("last_call", now + self.last_call_s)
        if len(alive) >= self.max_nodes or not missing or now >= last_call:
            self._close(r, plan, slots)

    def _leader(self, r: int) -> int:
        return self._s.read_int(Keys.lead(r), 0)

    def _wait_closed(self, r: int, slot: int, deadline: float) -> Closed | None:
        state: dict[str, Any] = {}
        lead = slot == 0
        next_eval = time.monotonic() + (POLL_S if lead else self.keep_alive_s)
        step = POLL_MIN_S
        while True:
            if self._s.exists(Keys.decided(r)):
                self._raise_if_closed()
                raw = self._s.read(Keys.result(r))
                if raw is not None:
                    return _nodes(raw)
                return None  # fenced: the round moved on without closing with us
            now = time.monotonic()
            if now >= next_eval:
                if not lead:  # the leader's keep-alive only; its place when it is gone
                    lead = self._take_lead_if_gone(r, slot)
                if lead:
                    if self._round() != r:
                        return None
                    self._evaluate(r, state)
                    step = POLL_MIN_S
                next_eval = now + (POLL_S if lead else self.keep_alive_s)
                if lead and "last_call" in state:
                    next_eval = min(next_eval, max(now + 0.01, state["last_call"]))
            if now > deadline:
                alive = len(self._alive_participants(r, None))
                raise RendezvousTimeoutError(
                    f"round {r}: {alive} node(s) alive after {self.join_timeout_s:g} s, "
                    f"{self.min_nodes} needed"
                )
            step = self._pause(step, next_eval - time.monotonic(), r)

    def _pause(self, step: float, until_eval: float, r: int) -> float:
        """Sleep before the next poll: backing off from 5 ms to a cap that keeps the store
        host under POLLS_PER_S polls in all (the cap grows with the job's MAX nodes)."""
        time.sleep(max(0.0, min(step, until_eval)))
        return min(step * 2, max(0.1, self.max_nodes / POLLS_PER_S))

    def _take_lead_if_gone(self, r: int, slot: int | None) -> bool:
        """Whether this node (slot in round r, None: not in it) watches round r now: it
        does when the leader left or stopped beating (it takes the leader's place)."""
        lead = self._leader(r)
        if slot == lead:
            return True
        beat = self._s.read(Keys.heartbeat(r, lead))
        if beat is not None and self._fresh(beat):
            return False
        if slot is None:
            return True  # not in round r: watches this once, cannot take the place
        return self._s.cas(Keys.lead(r), str(lead) if lead else "", str(slot)) == str(slot)

    def _missing_from_previous(self, r: int, joined: set[str]) -> int:
        """Nodes of round r-1 (active or standby) not in round r yet that are neither left
        nor silent: while there are none, round r need not wait for its last call. Round
        0 has no previous round: it waits for MAX nodes or its last call."""
        if r == 0:
            return 1
        prev = self._previous(r - 1)
        if prev is None:
            return 1
        away = [(node, slot) for node, slot in prev.items() if node not in joined]
        beats = self._beats([(r - 1, slot) for _, slot in away])
        return sum(1 for b in beats if self._fresh(b))

    def _previous(self, r: int) -> dict[str, int] | None:
        """Slots of round r's assigned nodes by node id (read once: a closed round never
        changes)."""
        key = ("prev", r)
        if key not in self._cache:
            raw = self._s.read(Keys.result(r))
            if raw is None:
                return None
            assigned = set(_nodes(raw).assigned_slots())
            parts = self._participants(r)
            self._cache[key] = {p.node_id: i for i, p in parts.items() if i in assigned}
        return dict(self._cache[key])

    def _close(
        self,
        r: int,
        plan: list[Assignment] | None,
        slots: dict[str, int] | None = None,
        error: str | None = None,
    ) -> None:
        """Write round r's result (first writer wins): each slot's group rank (-1: not
        in the round), compact so that every node reading it costs a few bytes per node;
        or the error that fails the round on every participant (duplicate infra ranks);
        then wake its waiters."""
        if self._round() != r:
            return
        slots = slots or {}
        ranks = [-1] * (max(slots.values(), default=-1) + 1)
        for a in plan or []:
            ranks[slots[a.node_id]] = a.group_rank
        world = sum(1 for a in plan or [] if a.active)
        body: dict[str, Any] = {"round": r, "world": world, "ranks": ranks}
        if error is not None:
            body["error"] = error
        won = json.loads(self._s.cas(Keys.result(r), "", dumps(body)))
        size = str(sum(1 for g in won.get("ranks", []) if g >= 0))
        self._s.write_many({Keys.size(r): size, Keys.decided(r): "1"})

    def _dead_actives(self, r: int, result: Closed | None) -> bool:
        if not result:
            return False
        beats = self._beats([(r, s) for s in result.active_slots()])
        return any(not self._fresh(b) for b in beats)

    def _watch(self, r: int, result: Closed | None) -> bool:
        """Once per keep-alive interval while round r runs: the leader (or whoever takes
        its place) opens r+1 when an active node died or left. True when r+1 opened."""
        slot = self._beat[1] if self._beat is not None and self._beat[0] == r else None
        if not self._take_lead_if_gone(r, slot):
            return False
        if self._dead_actives(r, result):
            self.report(f"rendezvous round {r}: an active node left or stopped beating")
            self._open(r + 1)
            return True
        return False

    def _wait_next_round(self, r: int, result: Closed | None, deadline: float | None) -> None:
        """Wait until round r ends (r+1 opened, or the job closed); the leader opens r+1
        when an active node of r died or left."""
        next_watch = 0.0
        step = POLL_MIN_S
        while not self._s.exists(Keys.end(r)):
            now = time.monotonic()
            if now >= next_watch:
                next_watch = now + self.keep_alive_s
                if self._watch(r, result):
                    break
            if deadline is not None and now > deadline:
                raise RendezvousTimeoutError(f"round {r + 1} was not opened in time")
            step = self._pause(step, next_watch - time.monotonic(), r)

    def _keep_alive(self) -> None:
        while not self._stop.wait(self.keep_alive_s):
            beat = self._beat
            if beat is None:
                continue
            try:
                self._s.write(Keys.heartbeat(*beat), _now())
            except Exception:  # noqa: BLE001 - the store went away; the agent will see it
                return


def _now() -> str:
    return repr(time.time())


@dataclass(frozen=True)
class Closed:
    """A closed round's result: each slot's group rank (-1: not in the round), and how
    many are active (group ranks 0..world-1; higher ones are standbys)."""

    ranks: list[int]
    world: int

    @property
    def size(self) -> int:
        return sum(1 for g in self.ranks if g >= 0)

    def assignment(self, slot: int) -> Assignment | None:
        rank = self.ranks[slot] if slot < len(self.ranks) else -1
        return None if rank < 0 else Assignment(str(slot), rank, rank < self.world)

    def active_slots(self) -> list[int]:
        return [i for i, g in enumerate(self.ranks) if 0 <= g < self.world]

    def assigned_slots(self) -> list[int]:
        return [i for i, g in enumerate(self.ranks) if g >= 0]

    def __bool__(self) -> bool:
        return bool(self.ranks)


def _nodes(raw: str) -> Closed:
    """A closed round's result; RendezvousError when the round failed (the same one-line
    reason on every participant)."""
    data = json.loads(raw)
    if "error" in data:
        raise RendezvousError(f"round {data['round']}: {data['error']}")
    return Closed(list(data["ranks"]), int(data["world"]))


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
