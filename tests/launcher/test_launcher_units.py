"""Launcher parts on their own: cycle log writer, heartbeat server and client, config, attribution client."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from relaunch.launcher import config
from relaunch.launcher.attribution_client import EmbeddedClient, HttpClient, OffClient, VerdictInfo
from relaunch.launcher.cycle_log import MAX_LINE_BYTES, CycleLog, FileSink, LineSink, cycle_log_name
from relaunch.launcher.heartbeat import HeartbeatServer, RankMonitor
from tests._launcher_helpers import REPO, engine_available, run_relaunch

# -- cycle log ------------------------------------------------------------------------


class ListSink:
    """A LineSink that keeps lines in memory (the protocol is the contract under test)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.closed = False

    def write_line(self, line: str) -> None:
        assert not self.closed
        self.lines.append(line)

    def close(self) -> None:
        self.closed = True


def test_sink_protocol_and_names(tmp_path: Path) -> None:
    assert isinstance(ListSink(), LineSink)
    assert isinstance(FileSink(tmp_path / "x.log"), LineSink)
    assert cycle_log_name(3, None) == "cycle_3.log"
    assert cycle_log_name(3, 1) == "cycle_3.node1.log"


def test_cycle_log_whole_lines_from_concurrent_writers(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    sink = ListSink()
    log = CycleLog(sink)
    log.add_ranks({0: 4, 1: 5}, str(spool))

    def writer(local: int) -> None:
        with open(spool / f"{local}.out", "wb", buffering=0) as fh:
            for i in range(300):
                line = f"local {local} line {i} " + "x" * (i % 50) + "\n"
                # write each line in two pieces: the reader must never cut at the seam
                fh.write(line[:7].encode())
                fh.write(line[7:].encode())
            fh.write(b"tail without newline")

    threads = [threading.Thread(target=writer, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for i in range(20):
        log.event(f"event {i}")
    for t in threads:
        t.join()
    (spool / "0.err").write_bytes(b"\xff\xfe bad utf8\n[rank4]: torch prefixed line\n")
    (spool / "1.err").write_bytes(b"H" * (2 * MAX_LINE_BYTES + 5) + b"\n")
    log.close()
    assert sink.closed
    assert not spool.exists()  # the spool is removed once merged
    for rank, local in ((4, 0), (5, 1)):
        got = [ln for ln in sink.lines if ln.startswith(f"[rank{rank}]: local")]
        want = [f"[rank{rank}]: local {local} line {i} " + "x" * (i % 50) for i in range(300)]
        assert got == want
        assert f"[rank{rank}]: tail without newline" in sink.lines
    assert [ln for ln in sink.lines if ln.startswith("[relaunch] event")] == [
        f"[relaunch] event {i}" for i in range(20)
    ]
    assert "[rank4]: \ufffd\ufffd bad utf8" in sink.lines
    assert "[rank4]: torch prefixed line" in sink.lines
    huge = [ln for ln in sink.lines if ln.startswith("[rank5]: HHH")]
    assert [len(ln) - len("[rank5]: ") for ln in huge] == [MAX_LINE_BYTES, MAX_LINE_BYTES, 5]


def test_cycle_log_event_waits_and_multiline(tmp_path: Path) -> None:
    sink = FileSink(tmp_path / "c.log")
    log = CycleLog(sink)
    log.event("first\nsecond", wait=True)
    assert (tmp_path / "c.log").read_text() == "[relaunch] first\n[relaunch] second\n"
    log.close()
    log.close()  # idempotent


# -- heartbeats -----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_rank_monitor_timeouts() -> None:
    clock = Clock()
    mon = RankMonitor(cycle=0, heartbeat_timeout=5, initial_timeout=20, clock=clock)
    mon.observe(0, "hello")
    mon.observe(1, "hello")
    clock.now += 10
    assert mon.find_hang() is None  # within the initial timeout
    mon.observe(0, "hb")
    mon.observe(1, "sec_start", "step")
    clock.now += 4
    mon.observe(0, "hb")
    clock.now += 2
    hang = mon.find_hang()
    assert hang is not None and hang.rank == 1 and hang.section == "step" and not hang.initial
    assert hang.silent_for == pytest.approx(6)
    assert hang.others == []
    clock.now += 20
    hang = mon.find_hang()
    assert hang is not None and hang.rank == 1 and hang.others == [0]
    fresh = RankMonitor(cycle=0, heartbeat_timeout=5, initial_timeout=20, clock=clock)
    fresh.observe(2, "hello")
    clock.now += 21
    h = fresh.find_hang()
    assert h is not None and h.rank == 2 and h.initial
    off = RankMonitor(cycle=0, heartbeat_timeout=None, initial_timeout=None, clock=clock)
    off.observe(0, "hb")
    clock.now += 1e6
    assert off.find_hang() is None


def test_section_timeouts() -> None:
    clock = Clock()
    mon = RankMonitor(
        0, heartbeat_timeout=100, initial_timeout=100, section_timeouts={"ckpt": 3}, clock=clock
    )
    mon.observe(0, "sec_start", "step")
    mon.observe(1, "sec_start", "ckpt")
    clock.now += 2
    assert mon.find_hang() is None
    clock.now += 2  # 4 s in "ckpt" (limit 3), 4 s in "step" (no limit, heartbeat limit 100)
    hang = mon.find_hang()
    assert hang is not None and hang.rank == 1 and hang.section == "ckpt"
    assert hang.section_limit == 3 and hang.silent_for == pytest.approx(4)
    mon.observe(1, "sec_end", "ckpt")
    assert mon.find_hang() is None


def test_every_message_says_the_open_section() -> None:
    """A lost `sec_end` (full queue) is corrected by the rank's next message, which says
    which section it is in; nested sections fall back to the outer one."""
    clock = Clock()
    mon = RankMonitor(0, heartbeat_timeout=5, initial_timeout=100, clock=clock)
    mon.observe(1, "sec_start", "step", open_section="step")
    mon.observe(1, "hb", open_section=None)  # its sec_end never arrived
    clock.now += 6
    hang = mon.find_hang()
    assert hang is not None and (hang.rank, hang.section) == (1, None)
    mon.observe(1, "sec_start", "outer", open_section="outer")
    mon.observe(1, "sec_start", "inner", open_section="inner")
    mon.observe(1, "sec_end", "inner", open_section="outer")
    assert mon._ranks[1].section == "outer"
    mon.observe(2, "sec_start", "step")  # an older client without "o": markers alone
    mon.observe(2, "hb")
    assert mon._ranks[2].section == "step"


def test_a_section_end_lost_to_a_full_queue_is_not_reported(tmp_path: Path) -> None:
    """The real client against a launcher whose queue is full when the rank leaves its
    section: the `sec_end` is dropped, the next heartbeat still clears the section."""
    short = Path(tempfile.mkdtemp(prefix="relaunch-t-", dir="/tmp"))  # AF_UNIX path limit
    server = HeartbeatServer()
    try:
        mon = RankMonitor(cycle=0, heartbeat_timeout=60, initial_timeout=60)
        server.start_cycle(mon)
        collector = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        collector.bind(str(short / "c.sock"))  # nobody reads it until the worker says so
        collector.setblocking(False)
        code = (
            "import os, socket, sys\n"
            "from launcher.client import heartbeat, section\n"
            "heartbeat()\n"
            "with section('step'):\n"
            "    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
            "    s.setblocking(False)\n"
            "    try:\n"
            "        while True:\n"
            "            s.sendto(b'filler', os.environ['RELAUNCH_FT_SOCKET'])\n"
            "    except BlockingIOError:\n"
            "        pass\n"
            "print('left', flush=True)\n"
            "sys.stdin.readline()\n"
            "heartbeat()\n"
        )
        env = dict(os.environ, PYTHONPATH=str(REPO), RELAUNCH_FT_SOCKET=str(short / "c.sock"))
        env.update(RANK="1", RELAUNCH_CYCLE="0")
        proc = subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

        def relay() -> list[dict]:
            """Forward what the collector holds to the launcher's socket; the JSON ones."""
            got = []
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as out:
                while True:
                    try:
                        data = collector.recv(65536)
                    except BlockingIOError:
                        break
                    out.sendto(data, server.path)
                    if data != b"filler":
                        got.append(json.loads(data))
            assert server.sync(timeout=30)
            return got

        assert proc.stdout is not None and proc.stdout.readline() == b"left\n"
        first = relay()
        assert [m["k"] for m in first] == ["hello", "hb", "sec_start"]  # sec_end was dropped
        assert mon._ranks[1].section == "step"
        proc.communicate(b"go\n", timeout=30)
        assert proc.returncode == 0
        (last,) = relay()
        assert (last["k"], last["o"]) == ("hb", None)
        assert mon._ranks[1].section is None
        collector.close()
    finally:
        server.close()
        shutil.rmtree(short, ignore_errors=True)


def test_section_timeouts_from_cli_and_yaml(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("fault_tolerance:\n  rank_section_timeouts: {setup: 900, step: 120}\n")
    s = config.resolve({}, str(cfg))
    assert s.ft_rank_section_timeouts == {"setup": 900.0, "step": 120.0}
    parser = __import__("argparse").ArgumentParser()
    config.add_arguments(parser)
    ns = parser.parse_args(
        ["--ft-rank-section-timeouts", "step:5", "--ft-rank-heartbeat-timeout", "7"]
    )
    s = config.resolve(vars(ns), str(cfg))
    assert s.ft_rank_section_timeouts == {"step": 5.0} and s.ft_heartbeat_timeout == 7.0
    with pytest.raises(SystemExit):
        parser.parse_args(["--ft-rank-section-timeouts", "step"])


def test_heartbeat_server_with_real_client_process(tmp_path: Path) -> None:
    progress: list[tuple[int, int, dict]] = []
    server = HeartbeatServer(on_progress=lambda c, r, m: progress.append((c, r, m)))
    try:
        mon = RankMonitor(cycle=2, heartbeat_timeout=60, initial_timeout=60)
        server.start_cycle(mon)
        code = (
            "from launcher.client import heartbeat, section, report_progress\n"
            "heartbeat()\n"
            "with section('step'):\n"
            "    pass\n"
            "report_progress(iteration=7, checkpoint='/ck/7')\n"
        )
        env = dict(os.environ, PYTHONPATH=str(REPO), RELAUNCH_FT_SOCKET=server.path)
        for rank, cycle in ((3, "2"), (4, "1")):  # rank 4 is a straggler of cycle 1
            env.update(RANK=str(rank), RELAUNCH_CYCLE=cycle)
            subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=30)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.sendto(b"not json", server.path)
            s.sendto(json.dumps({"r": "x"}).encode(), server.path)
        assert server.sync(timeout=5)
        assert progress == [(2, 3, progress[0][2])]
        assert progress[0][2]["i"] == 7 and progress[0][2]["ckpt"] == "/ck/7"
        assert set(mon._ranks) == {3}
    finally:
        server.close()
    assert not os.path.exists(server.path)


def test_importing_the_client_starts_supervision(tmp_path: Path) -> None:
    server = HeartbeatServer()
    try:
        mon = RankMonitor(cycle=0, heartbeat_timeout=1000, initial_timeout=1e-6)
        server.start_cycle(mon)
        env = dict(os.environ, PYTHONPATH=str(REPO), RELAUNCH_FT_SOCKET=server.path)
        env.update(RANK="5", RELAUNCH_CYCLE="0")
        subprocess.run([sys.executable, "-c", "import launcher.client"], env=env, check=True)
        assert server.sync(timeout=5)
        hang = mon.find_hang()  # said hello, never heart-beat: the initial timeout applies
        assert hang is not None and hang.rank == 5 and hang.initial
    finally:
        server.close()


def test_client_without_launcher_is_a_no_op() -> None:
    code = (
        "from launcher.client import heartbeat, section, report_progress, start_heartbeat\n"
        "start_heartbeat(0.01); heartbeat(); report_progress(iteration=1)\n"
        "with section('s'): pass\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RELAUNCH_FT_SOCKET"}
    env["PYTHONPATH"] = str(REPO)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
    env["RELAUNCH_FT_SOCKET"] = "/nonexistent/dir/ft.sock"  # launcher gone: still no error
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr


# -- config ---------------------------------------------------------------------------


def test_resolve_precedence_default_yaml_cli(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "max-restarts: 7\nft_heartbeat_timeout: 12\nft_attribution_endpoint: off\n"
        "fault_tolerance:\n  initial_rank_heartbeat_timeout: 99\n  gpu_health: off\n"
    )
    s = config.resolve({"max_restarts": 2, "script": "x.py"}, str(cfg))
    assert s.max_restarts == 2 and s.sources["max_restarts"] == "cli"
    assert s.ft_heartbeat_timeout == 12.0 and s.sources["ft_heartbeat_timeout"] == "yaml"
    assert s.ft_initial_heartbeat_timeout == 99.0
    assert s.ft_attribution_endpoint == "off" and s.ft_gpu_health == "off"
    assert s.workers_stop_timeout == 15.0 and s.sources["workers_stop_timeout"] == "default"
    assert s.ft_attribution_stop_action == "log"  # the seed's default: record, do not act
    assert s.job_id.startswith("job-") and s.rdzv_id == s.job_id
    assert s.rdzv_endpoint == "127.0.0.1:0"


def test_db_url_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 25: one history for run, serve, analyze and mcp: flag > $RELAUNCH_DB > default
    monkeypatch.delenv("RELAUNCH_HOME", raising=False)
    monkeypatch.delenv("RELAUNCH_DB", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    s = config.resolve({"log_dir": str(tmp_path / "logs"), "job_id": "j"})
    assert s.db_url() == f"sqlite:///{tmp_path / 'user' / '.relaunch' / 'relaunch.db'}"
    monkeypatch.setenv("RELAUNCH_HOME", str(tmp_path / "home"))
    assert s.db_url() == f"sqlite:///{tmp_path / 'home' / 'relaunch.db'}"
    assert s.history_line().startswith(f"history: {tmp_path / 'home' / 'relaunch.db'} (default")
    monkeypatch.setenv("RELAUNCH_DB", "sqlite:///elsewhere.db")
    assert s.db_url() == "sqlite:///elsewhere.db"
    assert "($RELAUNCH_DB; precedence: flag > $RELAUNCH_DB > default)" in s.history_line()
    s.ft_db_url = "sqlite:///given.db"
    assert s.db_url() == "sqlite:///given.db"
    assert "(given on the command line;" in s.history_line()
    s.ft_attribution_endpoint = "off"
    assert s.history_line() == "history: none (--ft-attribution-endpoint off: no verdicts are kept)"
    assert s.audit_dir() == str(tmp_path / "logs" / "audit")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a\n- b\n", "expected a mapping"),
        ("tee: 9\n", "tee: 9: expected 0-3"),
        ("fault_tolerance:\n  restart_policy: min-healthy\n", "only any-failed"),
        ("fault_tolerance:\n  rdzv_impl: legacy\n", "barrier is the only implementation"),
        ("fault_tolerance:\n  max_no_progress_restarts: 1001\n", "between 1 and 1000"),
        ("max_restarts: -1\n", "max_restarts: -1: must be >= 0"),
        ("ft_attribution_endpoint: ftp://x\n", "must be embedded, off"),
        ("ft_attribution_stop_action: maybe\n", "is not one of"),
        ("max_restarts: [1\n", "is not valid YAML"),
    ],
)
def test_bad_yaml_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(config.ConfigError, match=None) as exc:
        config.resolve({}, str(cfg))
    assert message in str(exc.value)


def test_multi_node_needs_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(config.ConfigError, match="--rdzv-endpoint"):
        config.resolve({"nnodes": "1:2"})
    monkeypatch.setenv("RELAUNCH_JOB_SECRET", "a-test-secret-of-24-bytes")
    s = config.resolve({"nnodes": "1:2", "rdzv_endpoint": "127.0.0.1:29999"})
    assert (s.min_nodes, s.max_nodes) == (1, 2)


def test_multi_node_needs_a_job_secret_unless_insecure(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a job secret a multi-node job is refused; `--ft-insecure-store` opts out."""
    monkeypatch.delenv("RELAUNCH_JOB_SECRET", raising=False)
    multi = {"nnodes": "2", "rdzv_endpoint": "127.0.0.1:29999"}
    with pytest.raises(config.ConfigError, match="needs a job secret.*--ft-job-secret-file"):
        config.resolve(multi)
    s = config.resolve({**multi, "ft_insecure_store": True})
    assert s.job_secret is None and s.ft_insecure_store
    assert config.resolve({"nnodes": "1"}).job_secret is not None  # single node: generated


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.py"], "relaunch run: error: training script not found: missing.py"),
        (
            ["--ft-cfg-path", "nope.yaml", "x.py"],
            "relaunch run: error: config file not found: nope.yaml",
        ),
        (
            ["--job-id", "a/b", "x.py"],
            "relaunch run: error: --job-id 'a/b': must be letters, digits and ._:@+=-, "
            "starting with a letter or digit",
        ),
        (
            ["--log-dir", "x.py", "--job-id", "j", "x.py"],
            "relaunch run: error: cannot create the log folder x.py/j: Not a directory",
        ),
    ],
)
def test_cli_bad_input_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "x.py").write_text("print('never run')\n")
    r = run_relaunch(tmp_path, args, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [message]
    assert not (tmp_path / "relaunch-logs").exists()  # nothing was started


@pytest.mark.parametrize(
    ("flag", "value", "fragment"),
    [
        ("--nnodes", "3:1", "must satisfy 0 < MIN <= MAX"),
        ("--ft-attribution-endpoint", "tcp://x", "must be embedded, off"),
        ("--max-restarts", "-2", "must be >= 0"),
        ("--ft-attribution-stop-action", "halt", "invalid choice"),
    ],
)
def test_cli_bad_flag_values(tmp_path: Path, flag: str, value: str, fragment: str) -> None:
    r = run_relaunch(tmp_path, [flag, value, "x.py"], timeout=60)
    assert r.returncode == 2
    assert fragment in r.stderr and "Traceback" not in r.stderr


# -- attribution client ---------------------------------------------------------------


def _collect() -> tuple[list[VerdictInfo], list[str], threading.Event]:
    got: list[VerdictInfo] = []
    warnings: list[str] = []
    return got, warnings, threading.Event()


def _unreachable_endpoint() -> str:
    """http://127.0.0.1:PORT where nothing listens (the port was free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_http_client_unreachable_gives_fallback_restart() -> None:
    got, warnings, _ = _collect()
    c = HttpClient(got.append, warnings.append, endpoint=_unreachable_endpoint())
    c.register("j", 0, "/tmp/x.log", None)
    c.request_analysis("j", 0, "/tmp/x.log", None)
    assert c.drain(30)
    c.close()
    assert [(v.cycle, v.decision, v.source) for v in got] == [(0, "RESTART", "fallback")]
    assert any("unreachable" in w for w in warnings)


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_a_service_that_refuses_is_not_called_unreachable(
    tmp_path: Path, token: str | None
) -> None:
    """A real `relaunch serve --token-file`: a launcher without the token, or with a wrong
    one, is told the service refused (with the HTTP status and which flag to check), not
    that it is unreachable; the cycle still gets the fallback RESTART."""
    from tests._service_helpers import running_service

    with running_service(tmp_path, token="s3cret-token") as svc:
        got, warnings, _ = _collect()
        c = HttpClient(got.append, warnings.append, endpoint=svc.endpoint, token=token)
        log = svc.root / "cycle_0.log"
        log.write_text("[rank 1]: RuntimeError: boom\n")
        c.register("j", 0, str(log), None)
        c.request_analysis("j", 0, str(log), None)
        assert c.drain(60)
        c.close()
    assert [(v.cycle, v.decision, v.source) for v in got] == [(0, "RESTART", "fallback")]
    assert not any("unreachable" in w for w in warnings), warnings
    refused = [w for w in warnings if "refused the cycle" in w]
    assert len(refused) == 1, warnings
    assert "answered 401" in refused[0] or "answered 403" in refused[0], refused
    assert "--ft-attribution-token-file" in refused[0]


def test_node_health_to_an_unreachable_service_is_a_warning_not_a_crash() -> None:
    got, warnings, _ = _collect()
    c = HttpClient(got.append, warnings.append, endpoint=_unreachable_endpoint())
    c.report_node_health("j", 0, {"node": "node1", "healthy": False})
    assert c.drain(30)
    c.close()
    assert got == []
    assert any("node health report for cycle 0 not confirmed (http)" in w for w in warnings)


def test_embedded_node_health_after_the_verdict_publishes_the_re_decided_one(
    tmp_path: Path,
) -> None:
    """The analysis ran before the health report arrived: the report re-decides the cycle
    and the launcher gets the new verdict, which records the node."""
    if why := engine_available():
        pytest.skip(why)
    log = tmp_path / "cycle_0.log"
    log.write_text("[rank 3]: RuntimeError: CUDA error: unspecified launch failure\n")
    got, warnings, _ = _collect()
    c = EmbeddedClient(
        got.append, warnings.append, db_url=f"sqlite:///{tmp_path / 'h.db'}", audit_dir=None
    )
    c.release()
    c.request_analysis("job", 0, str(log), None)
    assert c.drain(60)
    c.report_node_health("job", 0, {"node": "node1", "healthy": False, "reason": "xid 79"})
    assert c.drain(60)
    c.close()
    assert warnings == []
    assert [v.raw.get("node_health", []) != [] for v in got] == [False, True]
    assert [v.redecided for v in got] == [False, True]
    assert "Node node1 failed its health check" in got[1].reason


def test_off_client_never_answers() -> None:
    got, warnings, _ = _collect()
    c = OffClient(got.append, warnings.append)
    c.register("j", 0, "/x", None)
    c.request_analysis("j", 0, "/x", None)
    assert c.drain(5)
    c.close()
    assert got == [] and warnings == []


def test_embedded_client_real_engine_never_blocks_caller(tmp_path: Path) -> None:
    why = engine_available()
    if why:
        pytest.skip(why)
    log = tmp_path / "cycle_0.log"
    log.write_text(
        "[relaunch] cycle 0 start\n[rank 0]: Traceback (most recent call last):\n"
        '[rank 0]:   File "train.py", line 3, in <module>\n'
        "[rank 0]: SyntaxError: invalid syntax\n[relaunch] rank 0 exited with code 1\n"
    )
    release = threading.Event()
    got: list[VerdictInfo] = []

    def on_verdict(v: VerdictInfo) -> None:
        release.wait(30)  # the verdict path is held; the caller must not be
        got.append(v)

    c = EmbeddedClient(
        on_verdict, lambda w: None, db_url=f"sqlite:///{tmp_path / 'h.db'}", audit_dir=None
    )
    c.register("job", 0, str(log), None)
    c.request_analysis("job", 0, str(log), None)  # returns although the verdict is held
    assert got == []
    release.set()
    assert c.drain(60)
    c.close()
    assert len(got) == 1 and got[0].cycle == 0 and got[0].source == "embedded"
    assert got[0].decision in ("STOP", "RESTART") and got[0].reason


def _verdict_sink_agent():  # type: ignore[no-untyped-def]
    """A RelaunchAgent with only what `_on_verdict` uses (no rendezvous, no workers)."""
    import io

    from relaunch.launcher.agent import RelaunchAgent

    agent = RelaunchAgent.__new__(RelaunchAgent)
    agent.settings = config.resolve({"ft_attribution_stop_action": "no-restart"})
    agent._out, agent._out_lock = io.StringIO(), threading.Lock()
    agent._state, agent._state_lock, agent._late_lines = None, threading.RLock(), []
    agent.verdicts, agent.stop_verdict, agent._stop_applied = {}, None, False
    agent.recorded_stops = []
    return agent


@pytest.mark.parametrize(
    ("nnodes", "endpoint", "refused"),
    [
        ("2", "embedded", True),
        ("1:3", "embedded", True),  # elastic: a round may have several nodes (issue 23)
        ("1:3", "off", False),  # no analysis: nothing to judge alone
        ("1:3", "http://127.0.0.1:8570", False),  # one service judges every node
        ("1", "embedded", False),
        ("1:1", "embedded", False),  # elastic on one node at most
    ],
)
def test_embedded_analysis_of_a_job_that_may_span_nodes_is_refused(
    nnodes: str, endpoint: str, refused: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from relaunch.launcher.agent import refusal

    monkeypatch.setenv("RELAUNCH_JOB_SECRET", "s" * 32)  # a multi-node job needs one (issue 26)

    s = config.resolve(
        {"nnodes": nnodes, "rdzv_endpoint": "127.0.0.1:29999", "ft_attribution_endpoint": endpoint}
    )
    why = refusal(s)
    if not refused:
        assert why is None
        return
    assert why is not None and "\n" not in why
    assert f"(--nnodes {nnodes})" in why and "relaunch serve" in why and "or use off" in why


def test_a_re_decided_restart_withdraws_a_stop_not_yet_applied() -> None:
    agent = _verdict_sink_agent()
    stop = VerdictInfo(2, "STOP", "llm bug", "llm_grounded_workload_bug", "embedded+llm")
    again = VerdictInfo(
        2, "RESTART", "node1 left", "restart.unhealthy_node_excluded", "embedded", redecided=True
    )
    agent._on_verdict(stop)
    assert agent.stop_verdict is stop
    agent._on_verdict(VerdictInfo(2, "RESTART", "the deterministic one", None, "embedded"))
    assert agent.stop_verdict is stop  # a first verdict arriving late never overrides a STOP
    agent._on_verdict(VerdictInfo(2, "RESTART", "no verdict", None, "fallback"))
    assert agent.stop_verdict is stop  # nor does a fallback
    agent._on_verdict(VerdictInfo(1, "RESTART", "older", None, "embedded", redecided=True))
    assert agent.stop_verdict is stop  # another cycle's re-decision neither
    agent._on_verdict(again)
    assert agent.stop_verdict is None and agent.verdicts[2] is again
    assert "STOP for cycle 2 withdrawn" in agent._out.getvalue()
    # once the monitor acted on a STOP, a later verdict cannot take it back
    agent._on_verdict(stop)
    agent._stop_applied = True
    agent._on_verdict(again)
    assert agent.stop_verdict is stop


# -- torchrun compatibility: console semantics, spellings, policy thresholds ----------


@pytest.mark.parametrize("redirects", ["0", "1", "3", "0:2,1:1"])
@pytest.mark.parametrize("tee", ["0", "2", "3", "1:3"])
@pytest.mark.parametrize("ranks_filter", ["", "0", "1"])
def test_console_shows_what_torchrun_shows(
    tmp_path: Path, redirects: str, tee: str, ranks_filter: str
) -> None:
    """Our console decision equals torch elastic's own DefaultLogsSpecs for the same values:
    tailed (tee) -> prefixed, inherited console stream -> raw, file or /dev/null -> hidden."""
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs, Std

    from relaunch.launcher.console import Console, ConsoleSpec, parse_ranks_filter, parse_std

    ranks = parse_ranks_filter(ranks_filter)
    torch_specs = DefaultLogsSpecs(
        log_dir=str(tmp_path),
        redirects=Std.from_str(redirects),
        tee=Std.from_str(tee),
        local_ranks_filter=set(ranks) or None,
    )
    dest = torch_specs.reify({lr: {"TORCHELASTIC_RUN_ID": "t"} for lr in range(2)})
    console = Console(
        ConsoleSpec(redirects=parse_std(redirects), tee=parse_std(tee), ranks_filter=ranks), 2
    )
    for lr in range(2):
        for stream, files, tees in (
            ("out", dest.stdouts, dest.tee_stdouts),
            ("err", dest.stderrs, dest.tee_stderrs),
        ):
            expected = "prefixed" if lr in tees else "raw" if files[lr] == "" else "hidden"
            assert console.mode(lr, stream) == expected, (lr, stream)


def test_console_prefixes() -> None:
    import io

    from relaunch.launcher.console import Console, ConsoleSpec, Std

    out, err = io.StringIO(), io.StringIO()
    c = Console(ConsoleSpec(tee=Std.ALL), 2, out, err)
    c.echo(1, 5, "out", "step 1", "step 1")
    c.echo(1, 5, "err", "[rank5]: Traceback", "Traceback")  # torch's prefix, not twice
    c = Console(ConsoleSpec(tee=Std.OUT, role="trainer"), 2, out, err)
    c.echo(1, 5, "out", "[rank5]: x", "x")  # torchrun's header, line as written
    c = Console(ConsoleSpec(tee=Std.OUT, template="<${role_name}:${rank}/${local_rank}> "), 2, out)
    c.echo(0, 4, "out", "y", "y")
    c = Console(ConsoleSpec(), 2, out)
    c.echo(0, 4, "out", "raw line", "raw line")
    assert out.getvalue().splitlines() == [
        "[rank5]: step 1",
        "[trainer1]:[rank5]: x",
        "<default:4/0> y",
        "raw line",
    ]
    assert err.getvalue().splitlines() == ["[rank5]: Traceback"]


@pytest.mark.parametrize(
    ("cli", "message"),
    [
        ({"tee": "4"}, None),
        ({"redirects": "0:1,x"}, None),
        ({"local_ranks_filter": "a"}, None),
        ({"log_line_prefix_template": "${nope}"}, None),
        ({"standalone": True, "nnodes": "1:2", "rdzv_endpoint": "h:1"}, "single-node"),
        ({"module": True, "no_python": True}, "cannot be used together"),
    ],
)
def test_bad_torchrun_values_are_clear_errors(cli: dict, message: str | None) -> None:
    parser = __import__("argparse").ArgumentParser()
    config.add_arguments(parser)
    if message is None:  # rejected by the option's type, as argparse reports it
        ((name, value),) = cli.items()
        flag = "--" + name.replace("_", "-")
        with pytest.raises(SystemExit):
            parser.parse_args([flag, value])
        return
    with pytest.raises(config.ConfigError, match=message):
        config.resolve(cli)


def test_rendezvous_endpoint_from_torchrun_spellings() -> None:
    assert config.resolve({}).rdzv_endpoint == "127.0.0.1:0"
    s = config.resolve({"standalone": True, "master_port": 29811, "rdzv_backend": "etcd"})
    assert (s.rdzv_backend, s.rdzv_endpoint) == ("c10d", "127.0.0.1:29811")
    s = config.resolve(
        {"master_addr": "10.0.0.1", "master_port": 29812, "nnodes": "2", "ft_insecure_store": True}
    )
    assert s.rdzv_endpoint == "10.0.0.1:29812"  # NVRx: also for c10d, multi-node allowed
    assert config.resolve({"rdzv_backend": "static"}).rdzv_endpoint == "127.0.0.1:29500"
    s = config.resolve({"master_port": 1, "rdzv_endpoint": "h:2"})
    assert s.rdzv_endpoint == "h:2"  # an explicit endpoint wins


def test_worker_command_like_torchrun() -> None:
    s = config.resolve({"script": "pkg.mod", "script_args": ["a"], "module": True})
    assert s.worker_command() == (sys.executable, ("-u", "-m", "pkg.mod", "a"))
    s = config.resolve({"script": "/bin/true", "script_args": ["a"], "no_python": True})
    assert s.worker_command() == ("/bin/true", ("a",))
    assert s.check_script() is None
    s = config.resolve({"script": "no-such-exe-here", "no_python": True})
    assert "not found on PATH" in (s.check_script() or "")
    s = config.resolve({"script": "t.py", "run_path": True, "no_python": True})
    entry, args = s.worker_command()
    assert entry.__name__ == "run_script_path" and args == (os.path.abspath("t.py"),)


def test_nvrx_yaml_section_precedence_and_warnings(tmp_path: Path) -> None:
    cfg = tmp_path / "megatron.yaml"
    cfg.write_text(
        "model:\n  layers: 2\n"
        "training:\n  fault_tolerance:\n"
        "    rank_heartbeat_timeout: 120\n    initial_rank_heartbeat_timeout: 900\n"
        "    restart_policy: any-failed\n    rdzv_impl: barrier\n"
        "    max_no_progress_cycles: 4\n    same_root_retries: 2\n"
        "    min_progress_iterations: 3\n    safety_factor: 4\n    tee: 3\n"
        "    rank_out_of_section_timeout: 90\n    calc_ft_timeouts: true\n"
        "    num_warmup_iterations: 5\n"
        "    rank_hartbeat_timeout: 5\n"
    )
    s = config.resolve({"ft_same_root_retries": 7}, str(cfg))
    assert (s.ft_heartbeat_timeout, s.ft_initial_heartbeat_timeout) == (120.0, 900.0)
    assert s.tee == "3" and s.ft_rdzv_impl == "barrier"
    assert s.ft_max_no_progress_restarts == 4  # NVRx spelling, from YAML
    assert s.ft_same_root_retries == 7 and s.sources["ft_same_root_retries"] == "cli"
    assert s.policy().job_no_progress_ceiling == 4
    assert s.policy().same_root_no_progress_retries == 7
    warnings = "\n".join(s.warnings)
    # NVRx keys relaunch now acts on (progress guard, calculated timeouts)
    assert (s.ft_min_progress_iterations, s.ft_safety_factor) == (3, 4.0)
    assert (s.ft_rank_out_of_section_timeout, s.ft_calculate_timeouts) == (90.0, True)
    assert "'num_warmup_iterations' ignored" in warnings
    assert "unknown option 'rank_hartbeat_timeout' ignored" in warnings
    assert "did you mean 'rank_heartbeat_timeout'" in warnings
    assert "--ft-restart-policy is deprecated" in warnings
    assert len(s.warnings) == 3
    # the model's keys outside the section are not options and are not reported
    assert "layers" not in warnings


def test_policy_thresholds_and_nvrx_no_progress_cycles(tmp_path: Path) -> None:
    p = config.resolve({}).policy()
    assert (p.same_root_no_progress_retries, p.job_no_progress_ceiling) == (3, 5)
    s = config.resolve(
        {
            "ft_max_no_progress_restarts": 2,
            "ft_workload_recurrence_stop": 2,
            "ft_startup_window": 30,
        },
    )
    assert s.policy().job_no_progress_ceiling == 2 and s.policy().workload_recurrence_stop == 2
    assert s.policy().startup_window_s == 30.0
    parser = __import__("argparse").ArgumentParser()
    config.add_arguments(parser)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("max_no_progress_restarts: 6\n")
    cli = vars(parser.parse_args(["--ft-max-no-progress-cycles", "0"]))  # NVRx: 0 = no ceiling
    assert config.resolve(cli, str(cfg)).policy().job_no_progress_ceiling == 1000
    cfg.write_text("max_no_progress_cycles: -1\n")
    assert config.resolve({}, str(cfg)).policy().job_no_progress_ceiling == 1000
    s = config.resolve({"ft_max_no_progress_restarts": 3, "ft_max_no_progress_cycles": 9})
    assert s.policy().job_no_progress_ceiling == 9  # same level: NVRx spelling applied last
    for bad in ("-1", "0", "1001", "x", "nan"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--ft-same-root-retries", bad])
    for bad in ("-1", "nan", "1e9"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--ft-startup-window", bad])


def test_serve_takes_the_same_policy_thresholds(tmp_path: Path) -> None:
    from relaunch.cli import serve_cmd

    args = serve_cmd.build_parser("relaunch serve").parse_args(
        ["--max-no-progress-restarts", "7", "--same_root_retries", "2"]
    )
    policy = serve_cmd.settings_from_args(args).policy
    assert (policy.job_no_progress_ceiling, policy.same_root_no_progress_retries) == (7, 2)
    assert policy.workload_recurrence_stop == 1  # default kept
    r = run_relaunch(tmp_path, ["--same-root-retries", "2000", "--port", "0"], cmd="serve")
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "relaunch serve: error: --same-root-retries '2000': must be between 1 and 1000"
    ]


def test_nproc_per_node_words_like_torchrun() -> None:
    import torch

    parser = __import__("argparse").ArgumentParser()
    config.add_arguments(parser)
    assert parser.parse_args(["--nproc_per_node", "cpu"]).nproc_per_node == os.cpu_count()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    auto = parser.parse_args(["--nproc-per-node", "auto"]).nproc_per_node
    assert auto == (gpus or os.cpu_count())
    for bad in ("0", "many"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--nproc-per-node", bad])
    if gpus == 0:
        with pytest.raises(SystemExit):
            parser.parse_args(["--nproc-per-node", "gpu"])


def test_run_help_names_every_exit_code_of_the_launcher() -> None:
    """`relaunch run --help` lists each exit code `launcher.agent` can end with (a new one
    must reach the help text, not only docs/launcher.md)."""
    import contextlib
    import io

    from relaunch.cli.run_cmd import build_parser
    from relaunch.launcher import agent

    codes = {v for k, v in vars(agent).items() if k.startswith("EXIT_") and isinstance(v, int)}
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        build_parser("relaunch run").parse_args(["--help"])
    epilog = " " + " ".join(out.getvalue().split("Exit codes:", 1)[1].split()) + " "  # unwrapped
    for code in sorted(codes):
        assert f" {code} " in epilog, (code, epilog)


def test_the_rendezvous_closes_with_the_reason_its_nodes_exit_by() -> None:
    """A node that learns the job's end from the closed rendezvous exits as the node that
    closed it: `stopped` (a STOP acted on) 3 there, the progress guard's end is closed as
    `no_progress` (5 there, never 3), a node leaving alone closes nothing."""
    from relaunch.launcher.agent import NO_PROGRESS_CLOSE
    from relaunch.restart_agent.model import JobState

    agent = _verdict_sink_agent()
    agent.terminal, agent._no_progress = None, False
    assert agent.closing_reason() is None
    agent.terminal = JobState.FAILED
    assert agent.closing_reason() == "failed"
    agent.terminal = JobState.STOPPED
    assert agent.closing_reason() == "stopped"
    agent._no_progress = True
    assert agent.closing_reason() == NO_PROGRESS_CLOSE == "no_progress"
