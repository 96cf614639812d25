"""NVRx's rank monitor protocol served by relaunch (launcher.nvrx_monitor), against the real
NVRx 0.7.0 client: its own message classes pickled by its own pickler, its RankMonitorClient
connecting to our socket, and a training script using it unchanged under `relaunch run`."""

from __future__ import annotations

import os
import pickle
import re
import socket
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relaunch.launcher.heartbeat import RankMonitor
from relaunch.launcher.nvrx_monitor import (
    ENV_NVRX_SOCKET,
    AuthkeyMsg,
    HeartbeatMsg,
    InitMsg,
    NvrxMonitorServer,
    ProtocolError,
    SectionAction,
    SectionMsg,
    UpdateConfigMsg,
    decode,
    ok_message,
)
from tests._launcher_helpers import cycle_logs, job_args, read_log, run_relaunch
from tests._nvrx_helpers import nvrx_wheel, unpack

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def nvrx_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    wheel = nvrx_wheel()
    if isinstance(wheel, str):
        pytest.skip(wheel)
    root = unpack(wheel, tmp_path_factory.mktemp("nvrx"))
    sys.path.insert(0, str(root))
    try:
        yield root
    finally:
        sys.path.remove(str(root))


@pytest.fixture()
def nvrx(nvrx_path: Path) -> Any:
    from nvidia_resiliency_ext.fault_tolerance import data

    return data


def _nvrx_pickle(obj: object) -> bytes:
    from nvidia_resiliency_ext.fault_tolerance.utils import _IPC_PICKLER

    return bytes(_IPC_PICKLER.dumps(obj))


def test_every_client_message_decodes_to_our_types(nvrx: Any) -> None:
    info = nvrx.RankInfo(global_rank=5, local_rank=1, host="h", pid=42)
    auth = decode(_nvrx_pickle(nvrx.AuthkeyMsg(b"k" * 32)))
    assert isinstance(auth, AuthkeyMsg) and auth.field("authkey") == b"k" * 32
    init = decode(_nvrx_pickle(nvrx.InitMsg(rank_info=info, iteration=7, num_warmup_iters=2)))
    assert isinstance(init, InitMsg)
    assert init.field("rank_info").field("global_rank") == 5
    hb = decode(_nvrx_pickle(nvrx.HeartbeatMsg(5, {})))
    assert isinstance(hb, HeartbeatMsg) and hb.field("rank") == 5
    sec = decode(_nvrx_pickle(nvrx.SectionMsg(5, "step", nvrx.SectionAction.CLOSE, 9)))
    assert isinstance(sec, SectionMsg) and sec.field("action") is SectionAction.CLOSE
    upd = nvrx.UpdateConfigMsg(
        hb_timeouts=nvrx.HeartbeatTimeouts(30.0, 6.0, True),
        section_timeouts=nvrx.SectionTimeouts({"step": 3.0}, 9.0, {"step"}, True),
    )
    got = decode(_nvrx_pickle(upd))
    assert isinstance(got, UpdateConfigMsg)
    assert got.field("section_timeouts").field("calculated_sections") == {"step"}


class _Evil:
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, ("true",))


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (pickle.dumps(_Evil()), "refused class posix.system"),
        (pickle.dumps({"rank": 1}), "not a rank monitor message: dict"),
        (pickle.dumps(SectionAction.OPEN), "refused class"),  # our own module is not NVRx's
        (b"\x80\x04garbage", "undecodable message"),
        (b"\x80\x02" + b"N" * (2 << 20), "exceeds"),
    ],
)
def test_anything_else_is_refused(payload: bytes, says: str) -> None:
    with pytest.raises(ProtocolError, match=re.escape(says)):
        decode(payload)


def test_our_replies_unpickle_as_nvrx_objects(nvrx: Any) -> None:
    from nvidia_resiliency_ext.fault_tolerance.config import FaultToleranceConfig

    assert isinstance(pickle.loads(ok_message()), nvrx.OkMsg)
    reply = pickle.loads(
        ok_message({"rank_heartbeat_timeout": 6.0, "rank_section_timeouts": {"a": 2.0}})
    )
    assert isinstance(reply.cfg, FaultToleranceConfig)
    assert reply.cfg.rank_heartbeat_timeout == 6.0
    assert reply.cfg.rank_section_timeouts == {"a": 2.0}
    assert reply.cfg.skip_section_response is True  # NVRx's default, not set by us here


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_real_client_feeds_the_rank_monitor(
    nvrx: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient

    clock = _Clock()
    monitor = RankMonitor(0, 6.0, None, section_timeouts={"step": 3.0}, clock=clock)
    server = NvrxMonitorServer(str(tmp_path / "n.sock"), lambda: monitor)
    monkeypatch.setenv(ENV_NVRX_SOCKET, server.path)
    monkeypatch.setenv("RANK", "3")
    try:
        client = RankMonitorClient()
        client.init_workload_monitoring()
        assert client.cfg.rank_heartbeat_timeout == 6.0  # our config reached the client
        assert dict(client.cfg.rank_section_timeouts) == {"step": 3.0}
        client.send_heartbeat()
        client.start_section("step")
        # load_state_dict sends UpdateConfigMsg and waits for its OkMsg: everything sent
        # before it on this connection has been handled when it returns
        hb = {"initial": 50.0, "subsequent": 7.0, "were_calculated": True}
        client.load_state_dict({"current_timeouts": {"heartbeat": hb}})
        assert (monitor.initial_timeout, monitor.heartbeat_timeout) == (50.0, 7.0)
        assert {"initial", "heartbeat"} <= monitor.calculated
        assert monitor.ranks_seen() == {3}
        assert monitor.find_hang() is None
        clock.now += 3.5
        hang = monitor.find_hang()
        assert hang is not None
        assert hang.describe().startswith("hang detected: rank 3 in section 'step' for 3.5 s")
        client.end_section("step")
        client.load_state_dict({"current_timeouts": {"heartbeat": hb}})  # sync again
        assert monitor.find_hang() is None  # out of the section, heartbeat 0 s ago
        clock.now += 7.5
        assert "sent no heartbeat for 7.5 s" in monitor.find_hang().describe()  # type: ignore[union-attr]
        client.shutdown_workload_monitoring()
    finally:
        server.close()


def test_a_hostile_peer_loses_its_connection_only(tmp_path: Path) -> None:
    monitor = RankMonitor(0, 6.0, None)
    lines: list[str] = []
    server = NvrxMonitorServer(str(tmp_path / "n.sock"), lambda: monitor, say=lines.append)
    try:
        evil = pickle.dumps(_Evil())
        for frame in (struct.pack(">I", len(evil)) + evil, struct.pack(">I", 9) + b"\x00" * 3):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(server.path)
                s.sendall(frame)
                s.shutdown(socket.SHUT_WR)
                assert s.recv(10) == b""  # closed without a reply
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:  # still serving
            s.connect(server.path)
            auth = b"\x80\x02cnvidia_resiliency_ext.fault_tolerance.data\nAuthkeyMsg\n)\x81."
            s.sendall(struct.pack(">I", len(auth)) + auth)
            size = struct.unpack(">I", s.recv(4))[0]
            assert size == len(ok_message())
        assert monitor.ranks_seen() == set()
        assert any("refused class posix.system" in line for line in lines), lines
        assert any("connection ended inside a message" in line for line in lines), lines
    finally:
        server.close()


def _wire(cls: type, **fields: object) -> Any:
    obj = cls()
    obj.__dict__.update(fields)
    return obj


def test_a_config_update_cannot_switch_supervision_off_or_half_apply() -> None:
    """UpdateConfigMsg from one rank: its None keeps the launcher's timeout, a bad part
    (a huge number, a non-number) changes nothing and is one ProtocolError."""
    from relaunch.launcher.nvrx_monitor import HeartbeatTimeouts, SectionTimeouts, _apply_timeouts

    monitor = RankMonitor(0, 6.0, None, section_timeouts={"step": 3.0})
    initial = monitor.initial_timeout
    off = _wire(HeartbeatTimeouts, initial=None, subsequent=None, were_calculated=True)
    _apply_timeouts(monitor, _wire(UpdateConfigMsg, hb_timeouts=off, section_timeouts=None))
    assert (monitor.initial_timeout, monitor.heartbeat_timeout) == (initial, 6.0)
    good = _wire(HeartbeatTimeouts, initial=50.0, subsequent=7.0, were_calculated=True)
    for bad in (10**400, "7", float("nan")):
        sec = _wire(SectionTimeouts, section={"step": bad}, out_of_section=None)
        with pytest.raises(ProtocolError):
            _apply_timeouts(monitor, _wire(UpdateConfigMsg, hb_timeouts=good, section_timeouts=sec))
        assert monitor.heartbeat_timeout == 6.0  # the good heartbeat part was not applied
        assert monitor.section_timeouts == {"step": 3.0}
    _apply_timeouts(monitor, _wire(UpdateConfigMsg, hb_timeouts=good, section_timeouts=None))
    assert (monitor.initial_timeout, monitor.heartbeat_timeout) == (50.0, 7.0)


def _init_frame(rank: int) -> bytes:
    """An NVRx InitMsg for `rank`, pickled as NVRx's client pickles it (protocol 2+: the
    class by module and name, then its attributes), without the NVRx wheel."""
    import types

    name = "nvidia_resiliency_ext.fault_tolerance.data"
    mod = types.ModuleType(name)
    for cls_name in ("InitMsg", "RankInfo"):
        setattr(mod, cls_name, type(cls_name, (), {"__module__": name}))
    parents = ("nvidia_resiliency_ext", "nvidia_resiliency_ext.fault_tolerance")
    fakes = {n: types.ModuleType(n) for n in parents} | {name: mod}
    saved = {n: sys.modules.get(n) for n in fakes}
    sys.modules.update(fakes)
    try:
        info = mod.RankInfo()
        info.__dict__.update(global_rank=rank, local_rank=rank, host="h", pid=os.getpid())
        msg = mod.InitMsg()
        msg.__dict__.update(rank_info=info)
        data = pickle.dumps(msg, protocol=4)
    finally:
        for n, m in saved.items():
            if m is None:
                del sys.modules[n]
            else:
                sys.modules[n] = m
    return struct.pack(">I", len(data)) + data


def _say_init(path: str, rank: int) -> tuple[bytes, socket.socket]:
    """Connect, send an InitMsg for `rank`: the reply's length bytes (b"": closed
    unanswered) and the connection, still open (closing it makes the rank unsupervised)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(_init_frame(rank))
    return s.recv(4), s


def test_a_worker_cannot_speak_for_another_rank(tmp_path: Path) -> None:
    """In an authenticated cycle the peer's pid (SO_PEERCRED, set by the kernel) must be the
    worker of the rank its InitMsg claims, as for heartbeat datagrams."""
    from relaunch.launcher.heartbeat import HeartbeatServer

    server = HeartbeatServer()
    nvrx_path = str(Path(server.path).parent / "nvrx.sock")
    try:
        monitor = RankMonitor(0, 6.0, None)
        server.start_cycle(monitor, authenticated=True)
        server.set_workers({os.getpid(): 2})  # this process is rank 2's worker
        reply, refused = _say_init(nvrx_path, 5)
        refused.close()
        assert reply == b""  # refused: closed without a reply
        assert server.rejected == 1
        reply, own = _say_init(nvrx_path, 2)
        assert len(reply) == 4  # its own rank: answered (OkMsg)
        assert monitor.ranks_seen() == {2}  # rank 5 never got in
        own.close()
        # unauthenticated cycles (the standalone monitor) keep NVRx's behaviour
        other = RankMonitor(1, 6.0, None)
        server.start_cycle(other)
        reply, any_rank = _say_init(nvrx_path, 5)
        assert len(reply) == 4
        assert other.ranks_seen() == {5}
        any_rank.close()
    finally:
        server.close()


def test_nvrx_script_hangs_under_relaunch_run_and_is_restarted(
    nvrx_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(nvrx_path))  # the workers import NVRx from the wheel
    args = job_args(
        tmp_path,
        "nvrx",
        "--ft-attribution-endpoint",
        "off",
        "--max-restarts",
        "2",
        "--ft-rank-heartbeat-timeout",
        "6",
        "--ft-rank-section-timeouts",
        "step:3",
        "--workers-stop-timeout",
        "2",
    )
    r = run_relaunch(
        tmp_path, [*args, str(REPO / "tests" / "workers" / "nvrx_job.py")], timeout=240
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert cycle_logs(tmp_path, "nvrx") == ["cycle_0.log", "cycle_1.log", "cycle_2.log"]
    log0 = read_log(tmp_path, "nvrx", 0)
    assert "nvrx cfg: heartbeat=6.0 sections={'step': 3.0}" in log0
    assert re.search(r"\[relaunch\] hang detected: rank 1 sent no heartbeat for [\d.]+ s", log0), (
        log0[-2000:]
    )
    log1 = read_log(tmp_path, "nvrx", 1)
    assert re.search(
        r"\[relaunch\] hang detected: rank 0 in section 'step' for [\d.]+ s \(section timeout 3 s\)",
        log1,
    ), log1[-2000:]
    log2 = read_log(tmp_path, "nvrx", 2)
    assert "rank 0 done in cycle 2" in log2 and "rank 1 done in cycle 2" in log2
    assert "hang detected" not in log2
