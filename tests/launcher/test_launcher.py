"""`relaunch run` end to end with real worker processes (2 ranks, gloo on CPU)."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from tests._launcher_helpers import (
    WORKER,
    cycle_logs,
    engine_available,
    job_args,
    read_log,
    run_relaunch,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

LINE = re.compile(r"^(\[rank\d+\]: |\[relaunch\] )")


def _assert_all_lines_tagged(text: str) -> None:
    for n, line in enumerate(text.splitlines(), 1):
        assert LINE.match(line), f"line {n} has no rank/launcher prefix: {line[:120]!r}"


def test_success_one_cycle_exit_zero(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    r = run_relaunch(
        tmp_path,
        job_args(tmp_path, "ok", "--ft-attribution-endpoint", "off")
        + [str(WORKER), "--mode", "ok", "--marker", str(marker)],
    )
    assert r.returncode == 0, r.stderr
    assert cycle_logs(tmp_path, "ok") == ["cycle_0.log"]
    log = read_log(tmp_path, "ok", 0)
    _assert_all_lines_tagged(log)
    assert "[rank0]: hello from rank 0 of 2 in cycle 0" in log
    assert "[rank1]: hello from rank 1 of 2 in cycle 0" in log
    assert "[relaunch] cycle 0 start: job=ok" in log
    assert "[relaunch] progress rank=1 iteration=3" in log
    assert "[relaunch] all ranks exited with code 0" in log
    assert marker.read_text() == "done cycle 0\n"
    assert "job ok succeeded after 1 cycle(s)" in r.stderr
    # the raw per-rank spool is removed once merged
    assert not any((tmp_path / "logs" / "ok" / ".spool").glob("*/*.out"))


def test_crash_restarts_and_succeeds(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    r = run_relaunch(
        tmp_path,
        job_args(tmp_path, "crash", "--ft-attribution-endpoint", "off")
        + [str(WORKER), "--mode", "crash_once", "--marker", str(marker)],
    )
    assert r.returncode == 0, r.stderr
    assert cycle_logs(tmp_path, "crash") == ["cycle_0.log", "cycle_1.log"]
    log0 = read_log(tmp_path, "crash", 0)
    _assert_all_lines_tagged(log0)
    assert "[relaunch] rank 1 killed by signal SIGKILL" in log0
    assert "[relaunch] ranks 0 stopped by the launcher after the failure above" in log0
    assert "[relaunch] restart: cycle 0 failed; starting cycle 1" in log0
    assert "restart: cycle 0 failed (rank 1 killed by signal SIGKILL)" in r.stderr
    log1 = read_log(tmp_path, "crash", 1)
    assert "[relaunch] cycle 1 start:" in log1
    assert "[rank1]: hello from rank 1 of 2 in cycle 1" in log1
    assert marker.read_text() == "done cycle 1\n"


def test_hung_rank_detected_by_heartbeat(tmp_path: Path) -> None:
    r = run_relaunch(
        tmp_path,
        job_args(
            tmp_path,
            "hang",
            "--ft-attribution-endpoint",
            "off",
            "--ft-heartbeat-timeout",
            "2",
            "--workers-stop-timeout",
            "2",
        )
        + [str(WORKER), "--mode", "hang_once"],
    )
    assert r.returncode == 0, r.stderr
    log0 = read_log(tmp_path, "hang", 0)
    m = re.search(r"\[relaunch\] hang detected: rank (\d+) sent no heartbeat for ([\d.]+) s", log0)
    assert m, log0[-2000:]
    assert m.group(1) == "1"
    assert float(m.group(2)) >= 2.0  # declared only past the timeout (no upper bound: load)
    assert "stopping workers (terminate, force after 2 s)" in log0
    assert "hang detected: rank 1" in r.stderr
    assert cycle_logs(tmp_path, "hang") == ["cycle_0.log", "cycle_1.log"]
    assert "[relaunch] all ranks exited with code 0" in read_log(tmp_path, "hang", 1)


def test_section_timeout_detects_a_stuck_section(tmp_path: Path) -> None:
    r = run_relaunch(
        tmp_path,
        job_args(
            tmp_path,
            "sect",
            "--ft-attribution-endpoint",
            "off",
            "--ft-rank-section-timeouts",
            "ckpt:1.5,step:600",
            "--workers-stop-timeout",
            "2",
        )
        + [str(WORKER), "--mode", "slow_section_once"],
    )
    assert r.returncode == 0, r.stderr
    log0 = read_log(tmp_path, "sect", 0)
    m = re.search(
        r"hang detected: rank 0 in section 'ckpt' for ([\d.]+) s \(section timeout 1.5 s\)", log0
    )
    assert m, log0[-2000:]
    assert cycle_logs(tmp_path, "sect") == ["cycle_0.log", "cycle_1.log"]


def test_restart_budget_spent_exits_one(tmp_path: Path) -> None:
    r = run_relaunch(
        tmp_path,
        job_args(tmp_path, "budget", "--ft-attribution-endpoint", "off", "--max-restarts", "1")
        + [str(WORKER), "--mode", "fail_always"],
    )
    assert r.returncode == 1, r.stderr
    assert cycle_logs(tmp_path, "budget") == ["cycle_0.log", "cycle_1.log"]
    assert "[relaunch] rank 1 exited with code 7" in read_log(tmp_path, "budget", 1)
    assert "restart budget (1) spent" in r.stderr


def test_rank_prefixes_partial_and_huge_lines(tmp_path: Path) -> None:
    r = run_relaunch(
        tmp_path,
        job_args(tmp_path, "noisy", "--ft-attribution-endpoint", "off")
        + [str(WORKER), "--mode", "noisy"],
    )
    assert r.returncode == 0, r.stderr
    log = read_log(tmp_path, "noisy", 0)
    _assert_all_lines_tagged(log)
    lines = log.splitlines()
    assert "[rank0]: partial line completed" in lines
    assert "[rank0]: no newline at the end" in lines
    huge = [ln for ln in lines if ln.startswith("[rank0]: HHHH")]
    # a 3 MiB line is cut into 1 MiB pieces, each with its prefix; nothing lost
    assert [len(ln) - len("[rank0]: ") for ln in huge] == [1 << 20] * 3
    noise = [ln for ln in lines if ln.startswith("[rank0]: noise ")]
    assert noise == [f"[rank0]: noise {i}" for i in range(200)]


def test_yaml_values_and_cli_precedence(tmp_path: Path) -> None:
    cfg = tmp_path / "ft.yaml"
    cfg.write_text(
        "max_restarts: 0\nft-attribution-endpoint: off\n"
        "fault_tolerance:\n  rank_heartbeat_timeout: 30\n"
    )
    # YAML alone: no restart budget -> one cycle, exit 1
    r = run_relaunch(
        tmp_path,
        job_args(tmp_path, "yaml", "--ft-cfg-path", str(cfg))
        + [str(WORKER), "--mode", "fail_always"],
    )
    assert r.returncode == 1, r.stderr
    assert cycle_logs(tmp_path, "yaml") == ["cycle_0.log"]
    # the command line wins over the YAML value; the omitted options keep the YAML values
    r = run_relaunch(
        tmp_path,
        job_args(tmp_path, "cli", "--ft-cfg-path", str(cfg), "--max-restarts", "1")
        + [str(WORKER), "--mode", "fail_always"],
    )
    assert r.returncode == 1, r.stderr
    assert cycle_logs(tmp_path, "cli") == ["cycle_0.log", "cycle_1.log"]
    assert "verdict" not in read_log(tmp_path, "cli", 0)  # endpoint off came from YAML


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("kind", ["http", "unix"])
def test_unreachable_endpoint_degrades_to_restart(tmp_path: Path, kind: str) -> None:
    endpoint = (
        f"http://127.0.0.1:{_closed_port()}" if kind == "http" else f"unix://{tmp_path}/no.sock"
    )
    marker = tmp_path / "marker"
    r = run_relaunch(
        tmp_path,
        # worker output off the console: the launcher's own stderr must hold no traceback
        job_args(tmp_path, "unreach", "--ft-attribution-endpoint", endpoint, "--redirects", "3")
        + [str(WORKER), "--mode", "crash_once", "--marker", str(marker)],
    )
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert f"attribution endpoint {endpoint} unreachable" in r.stderr
    assert "verdict cycle=0 decision=RESTART source=fallback" in r.stderr
    assert marker.read_text() == "done cycle 1\n"
    assert "[relaunch] verdict cycle=0 decision=RESTART source=fallback" in read_log(
        tmp_path, "unreach", 1
    )


def test_deterministic_bug_stopped_by_verdict(tmp_path: Path) -> None:
    why = engine_available()
    if why:
        pytest.skip(why)
    r = run_relaunch(
        tmp_path,
        job_args(
            tmp_path, "bug", "--max-restarts", "5", "--ft-attribution-stop-action", "no-restart"
        )
        + [str(WORKER), "--mode", "bug"],
    )
    assert r.returncode == 3, r.stderr
    decisions = re.findall(r"relaunch: verdict cycle=(\d+) decision=(\w+)", r.stderr)
    # the policy: a probable workload bug restarts once, and stops on its first identical
    # recurrence without progress -> the verdict of cycle 1 is STOP
    assert decisions[:2] == [("0", "RESTART"), ("1", "STOP")], r.stderr
    assert "job stopped by verdict for cycle 1" in r.stderr
    # The launcher never waits for a verdict, so how many cycles started before the STOP
    # arrived depends on the machine's load; what the design promises is that the job ends
    # at the first cycle boundary after it: only the last cycle's log records the STOP.
    logs = cycle_logs(tmp_path, "bug")
    assert logs == [f"cycle_{n}.log" for n in range(len(logs))] and len(logs) >= 2, logs
    recorded = [
        n for n in range(len(logs)) if "STOP verdict for cycle 1" in read_log(tmp_path, "bug", n)
    ]
    assert recorded == [len(logs) - 1], (logs, recorded)
    db = tmp_path / "logs" / "relaunch.db"
    assert not db.exists() or db.stat().st_size > 0


def test_stop_action_log_only_records(tmp_path: Path) -> None:
    why = engine_available()
    if why:
        pytest.skip(why)
    r = run_relaunch(
        tmp_path,
        job_args(tmp_path, "logonly", "--max-restarts", "2", "--ft-attribution-stop-action", "log")
        + [str(WORKER), "--mode", "bug"],
    )
    assert r.returncode == 1, r.stderr  # the budget ends the job, not the verdict
    assert cycle_logs(tmp_path, "logonly") == ["cycle_0.log", "cycle_1.log", "cycle_2.log"]
    assert "decision=STOP" in r.stderr


def test_sigterm_to_launcher_stops_workers(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests._launcher_helpers import relaunch_env

    proc = subprocess.Popen(
        [sys.executable, "-m", "relaunch.cli", "run"]
        + job_args(tmp_path, "sig", "--ft-attribution-endpoint", "off")
        + [str(WORKER), "--mode", "sleep"],
        cwd=tmp_path,
        env=relaunch_env(tmp_path),
        stderr=subprocess.PIPE,
        text=True,
    )
    log = tmp_path / "logs" / "sig" / "cycle_0.log"
    deadline = time.monotonic() + 60
    while not (log.exists() and "hello from rank 1" in log.read_text()):
        assert proc.poll() is None and time.monotonic() < deadline, "workers never started"
        time.sleep(0.2)
    pids = [int(p) for p in re.findall(r"pid (\d+)", log.read_text())]
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "received SIGTERM; workers stopped" in err
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        raise AssertionError(f"worker {pid} still alive")
