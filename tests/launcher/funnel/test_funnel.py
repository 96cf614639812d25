"""gRPC log funnel end to end: a real writer on loopback, node clients in their own processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import grpc
import pytest

from relaunch.launcher.funnel import (
    FunnelError,
    FunnelServer,
    FunnelSink,
    log_funnel_pb2,
    log_funnel_pb2_grpc,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
ENV = dict(os.environ, PYTHONPATH=str(REPO_ROOT))


def _line(node: str, seq: int) -> str:
    # Variable length (up to ~6 KiB) so batches and single writes cross page/pipe sizes.
    body = (f"{node}-{seq}-" * (1 + (seq * 7919) % 400))[: 20 + (seq * 7919) % 6000]
    return f"{node} {seq:06d} {zlib.crc32(body.encode()):08x} {body}"


def _node_input(node: str, count: int) -> bytes:
    return "".join(_line(node, i) + "\n" for i in range(count)).encode()


def _spawn_node(address: str, relpath: str, node: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "relaunch.launcher.funnel",
            "send",
            "--address",
            address,
            "--path",
            relpath,
            "--node-id",
            node,
            "--batch-lines",
            "64",
        ],
        cwd=REPO_ROOT,
        env=ENV,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _check_file(path: Path) -> dict[str, list[int]]:
    """Every line intact (checksum), attributed (node field); per-node sequence numbers."""
    seqs: dict[str, list[int]] = {}
    data = path.read_bytes()
    assert data.endswith(b"\n")
    for raw in data.split(b"\n")[:-1]:
        node, seq, crc, body = raw.decode().split(" ", 3)
        assert f"{zlib.crc32(body.encode()):08x}" == crc, f"torn line from {node}: {raw[:80]!r}"
        assert body.startswith(f"{node}-{int(seq)}-"), f"mixed line: {raw[:80]!r}"
        seqs.setdefault(node, []).append(int(seq))
    return seqs


def test_several_node_processes_same_and_different_files(tmp_path: Path) -> None:
    root = tmp_path / "logs" / "job1"
    n_lines = 1500
    shared = "cycle_3.log"
    plan = {
        "node0": shared,
        "node1": shared,
        "node2": shared,
        "node3": shared,
        "node4": "per_node/cycle_3.node4.log",
        "node5": "per_node/cycle_3.node5.log",
    }
    with FunnelServer(root) as server:
        procs = {node: _spawn_node(server.address, rel, node) for node, rel in plan.items()}
        # communicate() in threads: all nodes write at the same time.
        results: dict[str, tuple[bytes, bytes]] = {}

        def run(node: str, p: subprocess.Popen[bytes]) -> None:
            results[node] = p.communicate(_node_input(node, n_lines), timeout=120)

        feeders = [threading.Thread(target=run, args=item) for item in procs.items()]
        for t in feeders:
            t.start()
        for t in feeders:
            t.join(timeout=150)
        for node, p in procs.items():
            assert p.returncode == 0, results[node][1].decode()
            assert b'"sent": 1500' in results[node][0]
            assert b'"lines_written": 1500' in results[node][0]
        stats = server.stats()
    assert stats["lines_by_node"] == {node: n_lines for node in plan}
    assert stats["open_files"] == 0  # every stream released its file

    seqs = _check_file(root / shared)
    assert sorted(seqs) == ["node0", "node1", "node2", "node3"]
    for node, got in seqs.items():
        assert got == list(range(n_lines)), f"{node}: lines lost or reordered"
    for node in ("node4", "node5"):
        own = _check_file(root / plan[node])
        assert own == {node: list(range(n_lines))}


@pytest.mark.parametrize(
    "relpath, code, message",
    [
        ("../escape.log", "INVALID_ARGUMENT", "'..'"),
        ("a/../../escape.log", "INVALID_ARGUMENT", "'..'"),
        ("{outside}/escape.log", "INVALID_ARGUMENT", "outside the log root"),
        ("link_out/escape.log", "PERMISSION_DENIED", "symlink 'link_out'"),
        ("link_file.log", "PERMISSION_DENIED", "symlink 'link_file.log'"),
    ],
)
def test_path_attacks_get_a_grpc_error(
    tmp_path: Path, relpath: str, code: str, message: str
) -> None:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "victim.log").write_text("untouched\n")
    os.symlink(outside, root / "link_out")
    os.symlink(outside / "victim.log", root / "link_file.log")
    relpath = relpath.format(outside=outside)
    with FunnelServer(root) as server:
        # Raw gRPC call: the status code and message the writer sends.
        with grpc.insecure_channel(server.address) as ch:
            stub = log_funnel_pb2_grpc.LogFunnelStub(ch)
            batches = iter([log_funnel_pb2.LineBatch(node_id="evil", path=relpath, lines=[b"x"])])
            with pytest.raises(grpc.RpcError) as info:
                stub.StreamLines(batches, timeout=10)
            assert info.value.code().name == code
            assert message in info.value.details()
        # Through the sink: a FunnelError with the same message.
        sink = FunnelSink(server.address, relpath, node_id="evil")
        with pytest.raises(FunnelError, match=code):
            for _ in range(100):
                sink.write_line("attack")
                time.sleep(0.01)
            sink.close()
        # The writer keeps serving honest clients.
        with FunnelSink(server.address, "ok.log", node_id="good") as good:
            good.write_line("fine")
        assert server.stats()["rejected_paths"] == 2
    assert (root / "ok.log").read_text() == "fine\n"
    assert sorted(p.name for p in outside.iterdir()) == ["victim.log"]
    assert (outside / "victim.log").read_text() == "untouched\n"


def test_first_batch_without_path_is_rejected(tmp_path: Path) -> None:
    with FunnelServer(tmp_path) as server, grpc.insecure_channel(server.address) as ch:
        stub = log_funnel_pb2_grpc.LogFunnelStub(ch)
        with pytest.raises(grpc.RpcError) as info:
            stub.StreamLines(iter([log_funnel_pb2.LineBatch(lines=[b"x"])]), timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "must name its log path" in info.value.details()
        assert stub.Ping(log_funnel_pb2.PingRequest(), timeout=10).ok


def test_cli_send_bad_path_is_one_line_error(tmp_path: Path) -> None:
    with FunnelServer(tmp_path / "r") as server:
        p = _spawn_node(server.address, "../../etc/x", "n0")
        out, err = p.communicate(b"hello\n", timeout=60)
    assert p.returncode == 2
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("funnel: ")
    assert "traversal is not allowed" in lines[0]
    assert out == b""


def test_partial_batch_is_flushed_by_timer_and_close(tmp_path: Path) -> None:
    with FunnelServer(tmp_path) as server:
        sink = FunnelSink(server.address, "t.log", batch_lines=1000, flush_interval_s=0.05)
        sink.write_line("first")
        deadline = time.monotonic() + 10
        target = tmp_path / "t.log"
        while time.monotonic() < deadline:
            if target.exists() and target.read_bytes() == b"first\n":
                break
            time.sleep(0.02)
        assert target.read_bytes() == b"first\n"  # arrived without close()
        sink.write_line("second\n")  # one trailing newline is the line end, not a new line
        sink.close()
        sink.close()  # idempotent
        assert sink.summary == {"lines_written": 2, "bytes_written": 13}
        with pytest.raises(FunnelError, match="after close"):
            sink.write_line("late")
    assert target.read_bytes() == b"first\nsecond\n"


def test_bytes_and_odd_text_pass_through(tmp_path: Path) -> None:
    with (
        FunnelServer(tmp_path, prefix_node=True) as server,
        FunnelSink(server.address, "b.log", node_id="n7") as sink,
    ):
        sink.write_bytes(b"\xff\xfe raw")
        sink.write_line("caf\u00e9 \udcff")  # surrogateescape round-trips the raw byte
        sink.write_line("")
    assert (tmp_path / "b.log").read_bytes() == b"[n7] \xff\xfe raw\n[n7] caf\xc3\xa9 \xff\n[n7] \n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_backpressure_bounds_memory_when_writer_is_absent() -> None:
    port = _free_port()
    sink = FunnelSink(
        f"127.0.0.1:{port}",
        "x.log",
        batch_lines=10,
        max_pending_batches=2,
        send_timeout_s=1.0,
        close_timeout_s=1.0,
    )
    written = 0
    t0 = time.monotonic()
    with pytest.raises(FunnelError, match="accepted nothing for 1s"):
        for i in range(10_000):
            sink.write_line(f"line {i}")
            written += 1
    assert time.monotonic() - t0 < 30
    # Blocked after a handful of batches: the queue (2) plus what gRPC holds in flight.
    assert written < 100, written
    with pytest.raises(FunnelError):
        sink.close()


def test_writer_started_late_still_gets_every_line(tmp_path: Path) -> None:
    port = _free_port()
    sink = FunnelSink(f"127.0.0.1:{port}", "late.log", batch_lines=5, max_pending_batches=4)
    done: list[BaseException | None] = []

    def produce() -> None:
        try:
            for i in range(200):
                sink.write_line(f"l{i}")
            sink.close()
            done.append(None)
        except BaseException as exc:  # noqa: BLE001
            done.append(exc)

    t = threading.Thread(target=produce)
    t.start()
    time.sleep(0.5)  # the producer is blocked by backpressure now
    assert not done
    with FunnelServer(tmp_path, port=port):
        t.join(timeout=60)
    assert done == [None]
    assert (tmp_path / "late.log").read_text().splitlines() == [f"l{i}" for i in range(200)]


def test_bad_sink_arguments() -> None:
    with pytest.raises(ValueError, match="empty"):
        FunnelSink("127.0.0.1:1", "")
    with pytest.raises(ValueError, match=">= 1"):
        FunnelSink("127.0.0.1:1", "a.log", batch_lines=0)
    for address in ("", "localhost", "localhost:"):
        with pytest.raises(ValueError, match="expected host:port"):
            FunnelSink(address, "a.log")


def test_server_start_errors(tmp_path: Path) -> None:
    a = FunnelServer(tmp_path)
    port = a.start()
    try:
        with pytest.raises(RuntimeError, match="already started"):
            a.start()
        b = FunnelServer(tmp_path, port=port)
        with pytest.raises(Exception, match="bind|address|port"):
            b.start()
    finally:
        a.stop()
    a.stop()  # idempotent


def test_sink_is_a_cycle_log_line_sink(tmp_path: Path) -> None:
    try:
        from relaunch.launcher.cycle_log import LineSink
    except ImportError as exc:
        pytest.skip(f"relaunch.launcher.cycle_log not importable: {exc}")
    with FunnelServer(tmp_path) as server:
        sink = FunnelSink(server.address, "c.log")
        assert isinstance(sink, LineSink)
        sink.write_line("[rank 0]: hello")
        sink.close()
    assert (tmp_path / "c.log").read_text() == "[rank 0]: hello\n"


def test_writer_going_away_is_reported_to_the_node(tmp_path: Path) -> None:
    server = FunnelServer(tmp_path)
    server.start()
    sink = FunnelSink(server.address, "gone.log", batch_lines=1, send_timeout_s=5)
    sink.write_line("before")
    deadline = time.monotonic() + 10
    while not server.stats()["lines_by_node"] and time.monotonic() < deadline:
        time.sleep(0.01)
    server.stop(grace=0.2)
    with pytest.raises(FunnelError, match="went away while streaming 'gone.log'"):
        for _ in range(500):
            sink.write_line("after")
            time.sleep(0.01)
        sink.close()
    assert (tmp_path / "gone.log").read_text().startswith("before\n")


def test_one_stream_can_switch_files(tmp_path: Path) -> None:
    B = log_funnel_pb2.LineBatch
    batches = [
        B(node_id="n1", path="a.log", lines=[b"a1", b"a2"]),
        B(lines=[b"a3"]),
        B(path="sub/b.log", lines=[b"b1"]),
        B(path="a.log", lines=[b"a4"]),
    ]
    with FunnelServer(tmp_path) as server, grpc.insecure_channel(server.address) as ch:
        summary = log_funnel_pb2_grpc.LogFunnelStub(ch).StreamLines(iter(batches), timeout=10)
        assert (summary.lines_written, summary.bytes_written) == (5, 15)
        assert server.stats()["open_files"] == 0
    assert (tmp_path / "a.log").read_bytes() == b"a1\na2\na3\na4\n"
    assert (tmp_path / "sub" / "b.log").read_bytes() == b"b1\n"


def test_cli_serve_and_send(tmp_path: Path) -> None:
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "relaunch.launcher.funnel",
            "serve",
            "--root",
            str(tmp_path),
            "--prefix-node",
        ],
        cwd=REPO_ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stdout is not None
        first = serve.stdout.readline().split()
        assert first[0] == "LISTENING", first
        node = _spawn_node(first[1], "cli.log", "cli-node")
        out, err = node.communicate(b"one\ntwo", timeout=60)  # last line without newline
        assert node.returncode == 0, err
        assert b'"lines_written": 2' in out
        serve.terminate()
        rest, _ = serve.communicate(timeout=30)
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
    assert serve.returncode == 0
    assert '"cli-node": 2' in rest
    assert (tmp_path / "cli.log").read_bytes() == b"[cli-node] one\n[cli-node] two\n"


def test_cycle_log_falls_back_to_a_local_file_when_the_writer_goes_away(tmp_path: Path) -> None:
    """The funnel writer dies mid-cycle: the cycle log says so, calls back, and the lines
    written after the failure continue in the launcher's own copy of the log."""
    from relaunch.launcher.cycle_log import CycleLog

    root = tmp_path / "writer"
    root.mkdir()
    local = tmp_path / "local" / "cycle_0.log"
    local.parent.mkdir()
    errors: list[str] = []
    server = FunnelServer(root)
    server.start()
    log = CycleLog(
        FunnelSink(server.address, "cycle_0.log", flush_interval_s=0.02, send_timeout_s=5),
        fallback_path=local,
        on_sink_error=errors.append,
    )
    log.event("before the writer went away", wait=True)
    deadline = time.monotonic() + 10
    remote = root / "cycle_0.log"
    while time.monotonic() < deadline and b"before" not in (
        remote.read_bytes() if remote.exists() else b""
    ):
        time.sleep(0.02)
    assert remote.read_bytes() == b"[relaunch] before the writer went away\n"
    server.stop()
    n = 0
    while not errors and time.monotonic() < deadline + 20:
        log.event(f"after {n}", wait=True)
        n += 1
        time.sleep(0.05)
    log.close()
    assert errors and "log funnel at" in errors[0], errors
    text = local.read_text()
    assert text.startswith("[relaunch] warning: log sink failed (FunnelError: log funnel at")
    assert f"[relaunch] after {n - 1}\n" in text  # the line that met the failure is kept
    assert "before the writer" not in text  # what the writer had is not written twice
