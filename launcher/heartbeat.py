"""The launcher side of worker supervision: receive heartbeats, find hung ranks.

Workers (through `relaunch.client`) send small JSON datagrams to a Unix datagram socket
whose path the launcher passes in `RELAUNCH_FT_SOCKET`. `HeartbeatServer` owns the socket
and a receiver thread; `RankMonitor` keeps, per cycle, each rank's last heartbeat and
open section and answers "which rank is hung?". Progress reports are handed to a
callback so they land in the cycle log as `[relaunch] progress rank=R iteration=N`;
straggler summaries (kind `strag`, docs/straggler.md) go to their own callback.

A rank is supervised from its first message (the client sends `hello` when it is first
used). Until its first heartbeat the initial timeout applies (initialisation is slow);
after that the heartbeat timeout. A rank that never talks to the launcher is not
supervised: it cannot be hung by this definition, only dead (which elastic sees).

The out-of-section timeout (NVRx's `rank_out_of_section_timeout`) bounds the time a rank
spends outside every section: counted from its first message, from leaving its last
section, or from its last progress report, whichever is latest (heartbeats do not reset
it: a background heartbeat thread proves the process lives, not that it advances). With
`--ft-calculate-timeouts` the monitor also records what it observes (`recorder`, see
`launcher.timeouts_auto`).

One rank cannot speak for another (docs/launcher.md, "Facts channel"): the socket has
`SO_PASSCRED`, so the kernel attaches each datagram's sender pid, which no unprivileged
process can forge. In an authenticated cycle (`start_cycle(monitor, authenticated=True)`)
the launcher names its workers' pids (`set_workers`); a datagram counts only when its
sender is a worker, or a descendant of one, whose rank is the `r` it claims. Datagrams
that arrive before `set_workers` wait (bounded) and are judged once it is called, so the
outcome does not depend on who was faster. NVRx's stream socket (`launcher.nvrx_monitor`)
checks its peer the same way, with `SO_PEERCRED` (`may_speak_for`). Every datagram is read as a
`HeartbeatMessage` (`launcher.heartbeat_message`, the type the worker side sends), typed and
bounded there (`clean_message`): strings lose their line breaks and control characters,
numbers out of range are dropped, before anything reaches a callback or the cycle log.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from relaunch.launcher.heartbeat_message import NOT_SAID, HeartbeatMessage
from relaunch.launcher.nvrx_monitor import ENV_NVRX_SOCKET, NvrxMonitorServer

ENV_SOCKET = "RELAUNCH_FT_SOCKET"
ENV_CYCLE = "RELAUNCH_CYCLE"
_MAX_DGRAM = 65536
MAX_PENDING = 10_000  # datagrams held until the cycle's worker pids are known
_CREDS = struct.Struct("3i")  # struct ucred: pid, uid, gid


def parent_pid(pid: int) -> int | None:
    """The parent of `pid` (from /proc), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read(4096)
        return int(stat[stat.rindex(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class _RankState:
    first_seen: float
    last_heartbeat: float | None = None
    section: str | None = None
    section_since: float = 0.0
    out_since: float = 0.0  # outside every section since (first message, section exit, progress)


@dataclass
class Hang:
    rank: int
    silent_for: float
    section: str | None
    initial: bool
    others: list[int] = field(default_factory=list)  # other ranks silent beyond their timeout
    section_limit: float | None = None  # set when a section timeout (not silence) was exceeded
    out_of_section_limit: float | None = None  # set when the out-of-section timeout was exceeded
    limit: float | None = None  # the timeout exceeded
    calculated: bool = False  # that timeout was calculated (--ft-calculate-timeouts)

    def describe(self) -> str:
        """The `hang detected: ...` line (the analyzer's pattern matches its start)."""
        how = ", calculated" if self.calculated else ""
        if self.out_of_section_limit is not None:
            text = (
                f"hang detected: rank {self.rank} outside any section for "
                f"{self.silent_for:.1f} s (out-of-section timeout {self.out_of_section_limit:g} s{how})"
            )
        elif self.section_limit is not None:
            text = (
                f"hang detected: rank {self.rank} in section {self.section!r} for "
                f"{self.silent_for:.1f} s (section timeout {self.section_limit:g} s{how})"
            )
        else:
            where = f" (in section {self.section!r})" if self.section else ""
            phase = " (before its first heartbeat)" if self.initial else ""
            text = (
                f"hang detected: rank {self.rank} sent no heartbeat for "
                f"{self.silent_for:.1f} s{phase}{where}"
            )
            if self.calculated and self.limit is not None:
                text += f" (timeout {self.limit:g} s, calculated)"
        if self.others:
            text += f"; also silent: ranks {','.join(map(str, self.others))}"
        return text


@dataclass
class RankMonitor:
    """Heartbeat bookkeeping of one cycle. Thread-safe."""

    cycle: int
    heartbeat_timeout: float | None
    initial_timeout: float | None
    section_timeouts: dict[str, float] = field(default_factory=dict)
    out_of_section_timeout: float | None = None
    calculated: frozenset[str] = frozenset()  # which timeouts were calculated (names below)
    recorder: Any = None  # launcher.timeouts_auto.Observations, or None
    clock: Callable[[], float] = time.monotonic
    _ranks: dict[int, _RankState] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def observe(
        self,
        rank: int,
        kind: str,
        section: str | None = None,
        sent_at: float | None = None,
        open_section: object = NOT_SAID,
    ) -> None:
        """Record a message; `sent_at` is the sender's time.monotonic() (same clock on a node).

        `open_section` is the section the rank said it was in when it sent the message
        (None: none); it overrides what the section markers said, since a marker can be
        lost to a full queue while the next message still arrives.
        """
        now = self.clock()
        if sent_at is not None and now - 60.0 < sent_at < now:
            now = sent_at  # order by when ranks spoke, not when the receiver got to it
        rec = self.recorder
        with self._lock:
            st = self._ranks.get(rank)
            if st is None:
                st = self._ranks[rank] = _RankState(first_seen=now, out_since=now)
            was_in = st.section
            if kind in ("hb", "sec_start", "sec_end", "progress"):
                if rec is not None:
                    if st.last_heartbeat is None:
                        rec.initial.add(now - st.first_seen)
                    else:
                        rec.heartbeat.add(now - st.last_heartbeat)
                st.last_heartbeat = now
            if kind == "sec_start":
                st.section = section
                st.section_since = now
            elif kind == "sec_end":
                if rec is not None and section is not None and st.section == section:
                    rec.section(section).add(now - st.section_since)
                st.section = None
            if open_section is not NOT_SAID and open_section != st.section:
                st.section = open_section  # type: ignore[assignment]
                st.section_since = now
            ended_outside = was_in is None and (st.section is not None or kind == "progress")
            if rec is not None and ended_outside:  # an out-of-section span ended
                rec.out_of_section.add(now - st.out_since)
            if st.section is None and (was_in is not None or kind == "progress"):
                st.out_since = now

    def forget(self, rank: int) -> None:
        """Stop supervising `rank` (it closed its NVRx connection: launcher.nvrx_monitor)."""
        with self._lock:
            self._ranks.pop(rank, None)

    def ranks_seen(self) -> set[int]:
        with self._lock:
            return set(self._ranks)

    def find_hang(self) -> Hang | None:
        """The rank silent longest beyond its timeout, or None."""
        now = self.clock()
        worst: Hang | None = None
        silent_ranks: list[int] = []
        with self._lock:
            for rank, st in self._ranks.items():
                if st.last_heartbeat is None:
                    limit, since, initial = self.initial_timeout, st.first_seen, True
                else:
                    limit, since, initial = self.heartbeat_timeout, st.last_heartbeat, False
                sec_limit = self.section_timeouts.get(st.section) if st.section else None
                if sec_limit and now - st.section_since > sec_limit:
                    silent_ranks.append(rank)
                    inside = now - st.section_since
                    if worst is None or inside > worst.silent_for:
                        worst = Hang(rank, inside, st.section, False, section_limit=sec_limit)
                        worst.calculated = f"section:{st.section}" in self.calculated
                    continue
                oos = self.out_of_section_timeout
                if st.section is None and oos and now - st.out_since > oos:
                    silent_ranks.append(rank)
                    outside = now - st.out_since
                    if worst is None or outside > worst.silent_for:
                        worst = Hang(rank, outside, None, False, out_of_section_limit=oos)
                        worst.calculated = "out_of_section" in self.calculated
                    continue
                if limit is None or limit <= 0:
                    continue
                silent = now - since
                if silent <= limit:
                    continue
                silent_ranks.append(rank)
                if worst is None or silent > worst.silent_for:
                    name = "initial" if initial else "heartbeat"
                    worst = Hang(rank, silent, st.section, initial, limit=limit)
                    worst.calculated = name in self.calculated
        if worst is not None:
            worst.others = sorted(r for r in silent_ranks if r != worst.rank)
        return worst


class HeartbeatServer:
    """A Unix datagram socket in a private temp dir and the thread that reads it."""

    def __init__(
        self,
        on_progress: Callable[[int, int, dict[str, Any]], None] | None = None,
        on_straggler: Callable[[int, int, dict[str, Any]], None] | None = None,
    ) -> None:
        base = "/tmp" if os.path.isdir("/tmp") else None  # short path: AF_UNIX limit is 108
        self._dir = tempfile.mkdtemp(prefix="relaunch-", dir=base)
        self.path = os.path.join(self._dir, "ft.sock")
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self._sock.bind(self.path)
        os.chmod(self._dir, 0o700)
        self._sock.settimeout(0.2)
        self._monitor: RankMonitor | None = None
        self._auth_lock = threading.RLock()  # held while one datagram is judged
        self._authenticated = False
        self._pids: dict[int, int] | None = None  # worker pid -> rank (None: not known yet)
        self._pid_cache: dict[int, int | None] = {}
        self._pending: list[tuple[bytes, int | None]] = []
        self._pids_known = threading.Event()  # set_workers was called for this cycle
        self.rejected = 0  # datagrams refused: malformed, or a rank not the sender's
        self._on_progress = on_progress
        self._on_straggler = on_straggler
        self._closed = threading.Event()
        self._synced: dict[str, threading.Event] = {}
        self._thread = threading.Thread(target=self._loop, name="relaunch-heartbeat", daemon=True)
        self._thread.start()
        # NVRx's RankMonitorClient speaks its own protocol on a stream socket: same monitor
        self._nvrx = NvrxMonitorServer(
            os.path.join(self._dir, "nvrx.sock"),
            lambda: self._monitor,
            authorize=self.may_speak_for,
        )

    def start_cycle(self, monitor: RankMonitor, authenticated: bool = False) -> None:
        """Judge datagrams for `monitor`'s cycle. `authenticated`: only the workers named
        by `set_workers` (and their descendants) may speak, each for its own rank."""
        with self._auth_lock:
            self._monitor = monitor
            self._authenticated = authenticated
            self._pids = None
            self._pid_cache = {}
            self._pending = []
            self._pids_known.clear()
        os.environ[ENV_NVRX_SOCKET] = self._nvrx.path  # the workers inherit it, as ENV_SOCKET

    def set_workers(self, pids: dict[int, int]) -> None:
        """The cycle's worker processes, pid -> global rank; judges the datagrams held."""
        with self._auth_lock:  # held through the replay: later datagrams wait their turn
            self._pids = dict(pids)
            self._pid_cache = {}
            self._pids_known.set()
            pending, self._pending = self._pending, []
            for data, pid in pending:
                self._handle(data, pid)

    def _loop(self) -> None:
        space = socket.CMSG_SPACE(_CREDS.size)
        while not self._closed.is_set():
            try:
                data, anc, _flags, _addr = self._sock.recvmsg(_MAX_DGRAM, space)
            except TimeoutError:
                continue
            except OSError:
                return
            pid = None
            for level, kind, payload in anc:
                creds = level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS
                if creds and len(payload) >= _CREDS.size:
                    pid = _CREDS.unpack(payload[: _CREDS.size])[0]
            try:
                self._handle(data, pid)
            except Exception:  # noqa: BLE001 - no datagram may end supervision for the job
                self.rejected += 1

    def may_speak_for(self, pid: int | None, rank: int) -> bool:
        """Whether process `pid` may report for `rank` (the NVRx socket's check of its peer,
        from SO_PEERCRED). In an authenticated cycle it waits until `set_workers` named the
        workers (the caller is the connection's own thread, never the launcher's)."""
        if not self._authenticated:
            return True
        self._pids_known.wait()
        with self._auth_lock:
            pids = self._pids
            if pids is None or pid is None or self._rank_of(pid, pids) != rank:
                self.rejected += 1
                return False
            return True

    def _rank_of(self, pid: int, pids: dict[int, int]) -> int | None:
        """The rank of worker `pid` or of the worker it descends from (cached per cycle)."""
        if pid in self._pid_cache:
            return self._pid_cache[pid]
        rank, p = None, pid
        for _ in range(32):
            if p in pids:
                rank = pids[p]
                break
            parent = parent_pid(p)
            if parent is None or parent <= 1 or parent == os.getpid():
                break
            p = parent
        if len(self._pid_cache) < 100_000:
            self._pid_cache[pid] = rank
        return rank

    def sync(self, timeout: float = 1.0) -> bool:
        """Return once every datagram sent before this call has been handled."""
        token = os.urandom(8).hex()
        done = self._synced[token] = threading.Event()
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.settimeout(timeout)
            try:
                s.sendto(json.dumps({"k": "sync", "token": token}).encode(), self.path)
            except OSError:
                return False
        ok = done.wait(timeout)
        self._synced.pop(token, None)
        return ok

    def _handle(self, data: bytes, pid: int | None = None) -> None:
        with self._auth_lock:
            self._judge(data, pid)

    def _judge(self, data: bytes, pid: int | None) -> None:
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError):
            self.rejected += 1
            return  # not ours or damaged: ignore, never crash the launcher
        if isinstance(raw, dict) and raw.get("k") == "sync":
            if pid is None or pid == os.getpid():  # only the launcher syncs
                event = self._synced.get(str(raw.get("token")))
                if event is not None:
                    event.set()
            return
        msg = HeartbeatMessage.from_wire(raw)
        if msg is None:
            self.rejected += 1
            return
        rank, cycle, kind = msg.rank, msg.cycle, msg.kind
        monitor = self._monitor
        if monitor is None or cycle != monitor.cycle:
            return  # a straggler of an earlier cycle
        if self._authenticated:
            pids = self._pids
            if pids is None:  # workers not started yet: judge once their pids are known
                if len(self._pending) < MAX_PENDING:
                    self._pending.append((data, pid))
                return
            if pid is None or self._rank_of(pid, pids) != rank:
                self.rejected += 1
                return  # a process speaking for a rank it is not
        monitor.observe(
            rank,
            kind,
            msg.section,
            msg.sent_at,
            msg.open_section if msg.open_said else NOT_SAID,
        )
        if kind == "progress" and self._on_progress is not None:
            self._on_progress(cycle, rank, msg.to_wire())
        elif kind == "strag" and self._on_straggler is not None:
            self._on_straggler(cycle, rank, msg.to_wire())

    def close(self) -> None:
        self._closed.set()
        self._pids_known.set()  # a connection waiting in may_speak_for ends
        self._nvrx.close()
        self._thread.join(1.0)
        self._sock.close()
        shutil.rmtree(self._dir, ignore_errors=True)
