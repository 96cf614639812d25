"""NVRx's rank monitor protocol, served by `relaunch run` (a drop-in for `RankMonitorClient`).

Workloads instrumented for NVIDIA Resiliency Extension (Megatron-LM `--enable-ft-package`,
NeMo) create `nvidia_resiliency_ext.fault_tolerance.RankMonitorClient`, which connects to
the UNIX stream socket named by `FT_RANK_MONITOR_IPC_SOCKET` and speaks length-prefixed
pickles (4 bytes big-endian length, then the pickle). This module owns that socket for the
launcher (`NvrxMonitorServer`) and turns what the client says into the same observations
relaunch's own client produces, fed to the cycle's `launcher.heartbeat.RankMonitor`: so the
launcher's hang detection, section timeouts and out-of-section timeout supervise an NVRx
workload unchanged.

Read from NVRx 0.7.0's `fault_tolerance/rank_monitor_client.py`, `data.py`, `utils.py`:

    client -> server          reply
    AuthkeyMsg(authkey)       OkMsg()
    InitMsg(rank_info, ...)   OkMsg(cfg=FaultToleranceConfig(...))   (the client reads its
                              timeouts, section names and `skip_section_response` from cfg)
    HeartbeatMsg(rank)        none (cfg.skip_section_response is True)
    SectionMsg(rank, section, action, iteration)                     none (same)
    UpdateConfigMsg(hb_timeouts, section_timeouts)                   OkMsg()

Decoding never runs the sender's code: `decode` uses a restricted unpickler that maps
exactly those message classes (and the value types they carry: `RankInfo`,
`HeartbeatTimeouts`, `SectionTimeouts`, `SectionAction`) to relaunch's own types here and
refuses every other global; the fields are then type-checked. A refused or damaged message
closes that connection (one line on the launcher's log), never the launcher. Replies are
written as hand-assembled pickles naming NVRx's classes, which exist on the client's side.

NVRx allows several sections open at once; relaunch's monitor tracks one: the most
recently opened one still open is the rank's current section (its timeout applies).
"""

from __future__ import annotations

import contextlib
import enum
import io
import os
import pickle
import socket
import struct
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

ENV_NVRX_SOCKET = "FT_RANK_MONITOR_IPC_SOCKET"
MAX_MESSAGE = 1 << 20  # a real message is a few hundred bytes
_DATA = "nvidia_resiliency_ext.fault_tolerance.data"
_CONFIG = "nvidia_resiliency_ext.fault_tolerance.config"


class ProtocolError(ValueError):
    """A message relaunch does not accept (refused class, bad field, too large)."""


class SectionAction(enum.Enum):
    OPEN = 1
    CLOSE = 2
    CLOSE_ALL = 3


class _Wire:
    """A decoded NVRx object: attributes as pickled, checked by the accessors below."""

    def field(self, name: str) -> Any:
        return self.__dict__.get(name)


class AuthkeyMsg(_Wire):
    pass


class InitMsg(_Wire):
    pass


class HeartbeatMsg(_Wire):
    pass


class SectionMsg(_Wire):
    pass


class UpdateConfigMsg(_Wire):
    pass


class RankInfo(_Wire):
    pass


class HeartbeatTimeouts(_Wire):
    pass


class SectionTimeouts(_Wire):
    pass


_ACCEPTED: dict[tuple[str, str], type] = {
    (_DATA, "AuthkeyMsg"): AuthkeyMsg,
    (_DATA, "InitMsg"): InitMsg,
    (_DATA, "HeartbeatMsg"): HeartbeatMsg,
    (_DATA, "SectionMsg"): SectionMsg,
    (_DATA, "UpdateConfigMsg"): UpdateConfigMsg,
    (_DATA, "RankInfo"): RankInfo,
    (_DATA, "HeartbeatTimeouts"): HeartbeatTimeouts,
    (_DATA, "SectionTimeouts"): SectionTimeouts,
    (_DATA, "SectionAction"): SectionAction,
}
MESSAGES = (AuthkeyMsg, InitMsg, HeartbeatMsg, SectionMsg, UpdateConfigMsg)


class _Restricted(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        cls = _ACCEPTED.get((module, name))
        if cls is None:
            raise ProtocolError(f"refused class {module}.{name}")
        return cls


def decode(data: bytes) -> _Wire:
    """One message's pickle -> one of `MESSAGES`, or ProtocolError."""
    if len(data) > MAX_MESSAGE:
        raise ProtocolError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE}")
    try:
        obj = _Restricted(io.BytesIO(data)).load()
    except ProtocolError:
        raise
    except Exception as exc:  # noqa: BLE001 - any damage is the same refusal
        raise ProtocolError(f"undecodable message: {type(exc).__name__}: {exc}") from None
    if not isinstance(obj, MESSAGES):
        raise ProtocolError(f"not a rank monitor message: {type(obj).__name__}")
    return obj


def _int(obj: _Wire, name: str) -> int:
    value = obj.field(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"{type(obj).__name__}.{name} must be an int")
    return value


def _timeout(value: Any, what: str) -> float | None:
    """NVRx's None means "not used"; a number must be positive and finite."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProtocolError(f"{what} must be a number or None")
    if not 0 < value < 1e9:  # compared before float(): a huge int would overflow it
        raise ProtocolError(f"{what} must be positive and below 1e9 s")
    return float(value)


def _section_name(obj: _Wire) -> str | None:
    name = obj.field("section")
    if name is not None and not (isinstance(name, str) and 0 < len(name) <= 200):
        raise ProtocolError("SectionMsg.section must be a short string")
    return name


# --- replies: pickles naming NVRx's classes, assembled by hand (protocol 2 opcodes) ---


def _p_value(value: Any) -> bytes:
    if value is None:
        return b"N"
    if value is True:
        return b"\x88"
    if value is False:
        return b"\x89"
    if isinstance(value, int):
        return b"J" + struct.pack("<i", value)
    if isinstance(value, float):
        return b"G" + struct.pack(">d", value)
    if isinstance(value, str):
        raw = value.encode()
        return b"X" + struct.pack("<I", len(raw)) + raw
    if isinstance(value, Mapping):
        return b"}" + _p_items(value)
    raise TypeError(f"cannot encode {type(value).__name__}")


def _p_items(items: Mapping[str, Any]) -> bytes:
    if not items:
        return b""
    body = b"".join(_p_value(k) + _p_value(v) for k, v in items.items())
    return b"(" + body + b"u"


def _p_object(module: str, name: str, state: Mapping[str, Any]) -> bytes:
    """`module.name.__new__(cls)` then its __dict__ updated from `state`."""
    head = b"c" + module.encode() + b"\n" + name.encode() + b"\n" + b")\x81"
    if not state:
        return head
    return head + b"}" + _p_items(state) + b"b"


def ok_message(cfg: Mapping[str, Any] | None = None) -> bytes:
    """The pickle of NVRx's `OkMsg()`, or `OkMsg(cfg=FaultToleranceConfig(**cfg))`."""
    if cfg is None:
        return b"\x80\x02" + _p_object(_DATA, "OkMsg", {}) + b"."
    cfg_pickle = _p_object(_CONFIG, "FaultToleranceConfig", cfg)
    head = b"c" + _DATA.encode() + b"\nOkMsg\n)\x81"
    return b"\x80\x02" + head + b"}(" + _p_value("cfg") + cfg_pickle + b"ub."


# --- the server ---


class Monitor(Protocol):
    """What this module needs of `launcher.heartbeat.RankMonitor`."""

    cycle: int
    heartbeat_timeout: float | None
    initial_timeout: float | None
    section_timeouts: dict[str, float]
    out_of_section_timeout: float | None
    calculated: frozenset[str]

    def observe(
        self,
        rank: int,
        kind: str,
        section: str | None = None,
        sent_at: float | None = None,
        open_section: object = ...,
    ) -> None: ...

    def forget(self, rank: int) -> None: ...


def client_config(monitor: Monitor | None, safety_factor: float) -> dict[str, Any]:
    """The FaultToleranceConfig fields the client reads, from the cycle's timeouts."""
    cfg: dict[str, Any] = {
        "skip_section_response": True,
        "install_exception_hook": False,
        "safety_factor": float(safety_factor),
        "initial_rank_heartbeat_timeout": None,
        "rank_heartbeat_timeout": None,
        "rank_section_timeouts": {},
        "rank_out_of_section_timeout": None,
    }
    if monitor is not None:
        cfg["initial_rank_heartbeat_timeout"] = monitor.initial_timeout
        cfg["rank_heartbeat_timeout"] = monitor.heartbeat_timeout
        cfg["rank_section_timeouts"] = {k: float(v) for k, v in monitor.section_timeouts.items()}
        cfg["rank_out_of_section_timeout"] = monitor.out_of_section_timeout
    return cfg


class _Connection:
    """One rank's connection: its rank, the cycle it joined, its open sections."""

    def __init__(self) -> None:
        self.rank: int | None = None
        self.pid: int | None = None  # the peer's, from SO_PEERCRED
        self.cycle: int | None = None
        self.open: list[str] = []


_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def _peer_pid(conn: socket.socket) -> int | None:
    """The connected process's pid, as the kernel recorded it at connect()."""
    try:
        raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    except (OSError, AttributeError):
        return None
    pid = _UCRED.unpack(raw)[0]
    return pid if pid > 0 else None


class NvrxMonitorServer:
    """The UNIX stream socket NVRx clients connect to, and one reader thread per client."""

    def __init__(
        self,
        path: str,
        current: Callable[[], Monitor | None],
        safety_factor: float = 5.0,
        say: Callable[[str], None] | None = None,
        authorize: Callable[[int | None, int], bool] | None = None,
    ) -> None:
        """`authorize(peer_pid, rank)`: whether the connected process (its pid from
        SO_PEERCRED, which it cannot forge) may report for `rank`; a refusal closes it."""
        self.path = path
        self._authorize = authorize
        self._current = current
        self._safety_factor = safety_factor
        self._say = say or (lambda line: print(f"[relaunch] {line}", file=sys.stderr))
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        os.chmod(path, 0o600)
        self._sock.listen(64)
        self._closed = threading.Event()
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="relaunch-nvrx", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self._conns.add(conn)
            threading.Thread(
                target=self._serve, args=(conn,), name="relaunch-nvrx-rank", daemon=True
            ).start()

    def _serve(self, conn: socket.socket) -> None:
        state = _Connection()
        state.pid = _peer_pid(conn)
        try:
            while True:
                data = _read_frame(conn)
                if data is None:
                    break
                reply = self._handle(state, decode(data))
                if reply is not None:
                    conn.sendall(struct.pack(">I", len(reply)) + reply)
        except ProtocolError as exc:
            self._say(f"NVRx rank monitor: connection closed: {exc}")
        except OSError:
            pass
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()
            monitor = self._current()
            if state.rank is not None and monitor is not None and monitor.cycle == state.cycle:
                monitor.forget(state.rank)  # like NVRx: a closed connection is not supervised

    def _handle(self, st: _Connection, msg: _Wire) -> bytes | None:
        monitor = self._current()
        if isinstance(msg, AuthkeyMsg):
            return ok_message()  # relaunch shares no objects with ranks: the key is not used
        if isinstance(msg, InitMsg):
            info = msg.field("rank_info")
            if not isinstance(info, RankInfo):
                raise ProtocolError("InitMsg.rank_info must be a RankInfo")
            rank = _int(info, "global_rank")
            if self._authorize is not None and not self._authorize(st.pid, rank):
                raise ProtocolError(f"process {st.pid} is no worker of rank {rank}")
            st.rank = rank
            st.cycle = monitor.cycle if monitor is not None else None
            st.open = []
            if monitor is not None:
                monitor.observe(st.rank, "hello", open_section=None)
            return ok_message(client_config(monitor, self._safety_factor))
        if st.rank is None:
            raise ProtocolError(f"{type(msg).__name__} before InitMsg")
        live = monitor is not None and monitor.cycle == st.cycle
        if isinstance(msg, HeartbeatMsg):
            if _int(msg, "rank") != st.rank:
                raise ProtocolError("HeartbeatMsg.rank differs from the InitMsg's")
            if live and monitor is not None:
                monitor.observe(st.rank, "hb")
            return None
        if isinstance(msg, SectionMsg):
            action = msg.field("action")
            if not isinstance(action, SectionAction):
                raise ProtocolError("SectionMsg.action must be a SectionAction")
            name = _section_name(msg)
            if live and monitor is not None:
                self._section(monitor, st, action, name)
            return None
        if isinstance(msg, UpdateConfigMsg):
            if live and monitor is not None:
                _apply_timeouts(monitor, msg)
            return ok_message()
        raise ProtocolError(f"unexpected {type(msg).__name__}")  # pragma: no cover

    @staticmethod
    def _section(
        monitor: Monitor, st: _Connection, action: SectionAction, name: str | None
    ) -> None:
        assert st.rank is not None
        if action is SectionAction.OPEN:
            if name is None or name in st.open:
                return  # NVRx logs "already open" and goes on
            st.open.append(name)
            monitor.observe(st.rank, "sec_start", name, open_section=name)
            return
        if action is SectionAction.CLOSE:
            if name not in st.open:
                return
            st.open.remove(name)
        else:
            st.open.clear()
        current = st.open[-1] if st.open else None
        monitor.observe(st.rank, "sec_end", name, open_section=current)

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._thread.join(1.0)


def _apply_timeouts(monitor: Monitor, msg: _Wire) -> None:
    """UpdateConfigMsg: timeouts the client calculated replace the cycle's. Everything is
    checked before anything is assigned (a bad part changes nothing), and a client's None
    ("not used") keeps the launcher's timeout: one rank cannot switch supervision off."""
    hb = msg.field("hb_timeouts")
    sec = msg.field("section_timeouts")
    calc: set[str] = set()
    heartbeat: tuple[float | None, float | None] | None = None
    sections: tuple[dict[str, float], float | None] | None = None
    if hb is not None:
        if not isinstance(hb, HeartbeatTimeouts):
            raise ProtocolError("UpdateConfigMsg.hb_timeouts must be HeartbeatTimeouts")
        heartbeat = (
            _timeout(hb.field("initial"), "initial heartbeat timeout"),
            _timeout(hb.field("subsequent"), "heartbeat timeout"),
        )
        if hb.field("were_calculated") is True:
            calc |= {"initial", "heartbeat"}
    if sec is not None:
        if not isinstance(sec, SectionTimeouts):
            raise ProtocolError("UpdateConfigMsg.section_timeouts must be SectionTimeouts")
        named = sec.field("section") or {}
        if not isinstance(named, dict) or len(named) > 1000:
            raise ProtocolError("SectionTimeouts.section must be a mapping")
        checked: dict[str, float] = {}
        for key, value in named.items():
            if not isinstance(key, str):
                raise ProtocolError("section names must be strings")
            limit = _timeout(value, f"section {key!r} timeout")
            if limit is not None:
                checked[key] = limit
        sections = (checked, _timeout(sec.field("out_of_section"), "out-of-section timeout"))
        names = sec.field("calculated_sections")
        if isinstance(names, set | frozenset | list):
            calc |= {f"section:{n}" for n in names if isinstance(n, str)}
            if sec.field("is_out_of_section_calculated") is True:
                calc.add("out_of_section")
    if heartbeat is not None:
        initial, subsequent = heartbeat
        monitor.initial_timeout = initial if initial is not None else monitor.initial_timeout
        if subsequent is not None:
            monitor.heartbeat_timeout = subsequent
    if sections is not None:
        checked, oos = sections
        monitor.section_timeouts = {**monitor.section_timeouts, **checked}
        if oos is not None:
            monitor.out_of_section_timeout = oos
    monitor.calculated = monitor.calculated | calc


def _read_frame(conn: socket.socket) -> bytes | None:
    """One length-prefixed message; None at a clean end of the connection."""
    head = _read_exact(conn, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">I", head)
    if size > MAX_MESSAGE:
        raise ProtocolError(f"message of {size} bytes exceeds {MAX_MESSAGE}")
    body = _read_exact(conn, size)
    if body is None:
        raise ProtocolError("connection ended inside a message")
    return body


def _read_exact(conn: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            if buf:
                raise ProtocolError("connection ended inside a message")
            return None
        buf += chunk
    return bytes(buf)
