"""`relaunch run` records every job truthfully: real launcher processes, real SQLite history.

Success recorded as such, a failure in the first second kept, a re-run job id continued
(cycles 2 and 3 after 0 and 1), one job-wide cycle number and restart budget across two
launchers, SIGINT/SIGTERM always 130/143 with the history flushed, a bad database URL
rejected before any worker, launcher facts in the cycle log, STOP only logged by default.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests._launcher_helpers import (
    WORKER,
    cycle_logs,
    engine_available,
    job_args,
    read_log,
    relaunch_env,
    run_relaunch,
    run_two_nodes,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

FACT = re.compile(r"^\[relaunch\] fact: (\{.*\})$", re.M)


@pytest.fixture(autouse=True)
def _engine() -> None:
    if why := engine_available():
        pytest.skip(why)


def _repo(tmp_path: Path, db: Path | None = None) -> Any:
    from relaunch.storage import open_repository

    return open_repository(f"sqlite:///{db or tmp_path / 'home' / 'relaunch.db'}")


def _facts(text: str) -> list[dict[str, Any]]:
    """The fact lines' JSON without their `mac` (each is signed, issue 26)."""
    out = [json.loads(m) for m in FACT.findall(text)]
    for body in out:
        assert len(body.pop("mac", "")) == 32, body
    return out


def _cycles(tmp_path: Path, job: str) -> list[tuple[int, str, str | None]]:
    repo = _repo(tmp_path)
    try:
        return [(c.cycle, c.status, c.outcome) for c in repo.list_cycles(job)]
    finally:
        repo.close()


def _job(tmp_path: Path, job: str) -> Any:
    repo = _repo(tmp_path)
    try:
        return repo.get_job(job)
    finally:
        repo.close()


def test_success_is_recorded_not_left_running(tmp_path: Path) -> None:
    r = run_relaunch(tmp_path, job_args(tmp_path, "ok") + [str(WORKER), "--mode", "ok"])
    assert r.returncode == 0, r.stderr
    job = _job(tmp_path, "ok")
    assert (job.state, job.exit_code, job.end_reason) == (
        "succeeded",
        0,
        "all ranks exited with code 0",
    )
    assert job.ended_at is not None
    assert _cycles(tmp_path, "ok") == [(0, "ended", "succeeded")]
    log = tmp_path / "logs" / "ok" / "cycle_0.log"
    assert f"relaunch: cycle 0 log: {log.resolve()}" in r.stderr  # where the log is
    kinds = [f["fact"] for f in _facts(log.read_text())]
    assert kinds[0] == "cycle_start" and kinds[-2:] == ["iterations", "cycle_end"], kinds


def _quick_failure(tmp_path: Path) -> Path:
    script = tmp_path / "dies.py"
    script.write_text("import sys\nprint('bad config: no such dataset', flush=True)\nsys.exit(3)\n")
    return script


def test_failures_in_the_first_second_are_kept(tmp_path: Path) -> None:
    """Short runs used to leave no job row (the client's exit waited 2 s at most): every
    run now leaves its job, cycle, end and verdict."""
    script = _quick_failure(tmp_path)
    for n in range(3):
        job = f"quick{n}"
        r = run_relaunch(tmp_path, job_args(tmp_path, job, "--max-restarts", "0") + [str(script)])
        assert r.returncode == 1, r.stderr
        rec = _job(tmp_path, job)
        assert rec is not None, f"run {n}: no job row"
        assert (rec.state, rec.exit_code) == ("failed", 1)
        assert rec.end_reason == "restart budget (0) spent"
        repo = _repo(tmp_path)
        try:
            cyc = repo.get_cycle(job, 0)
        finally:
            repo.close()
        assert (cyc.status, cyc.outcome, cyc.decision) == ("analysed", "failed", "RESTART")
        assert "exited with code 3" in cyc.end_reason


def test_same_job_id_continues_its_history(tmp_path: Path) -> None:
    """A re-run job id goes on at cycle 2 after cycles 0 and 1; nothing is overwritten."""
    args = job_args(tmp_path, "again", "--max-restarts", "1") + [
        str(WORKER),
        "--mode",
        "fail_always",
    ]
    first = run_relaunch(tmp_path, args)
    assert first.returncode == 1, first.stderr
    assert cycle_logs(tmp_path, "again") == ["cycle_0.log", "cycle_1.log"]
    before = hashlib.sha256(read_log(tmp_path, "again", 0).encode()).hexdigest()
    repo = _repo(tmp_path)
    try:
        verdict0 = repo.get_cycle("again", 0).verdict
    finally:
        repo.close()
    assert verdict0 is not None
    second = run_relaunch(tmp_path, args)
    assert second.returncode == 1, second.stderr
    assert "this run starts at cycle 2" in second.stderr
    assert cycle_logs(tmp_path, "again") == [f"cycle_{n}.log" for n in range(4)]
    assert hashlib.sha256(read_log(tmp_path, "again", 0).encode()).hexdigest() == before
    assert "[relaunch] cycle 2 start: job=again" in read_log(tmp_path, "again", 2)
    assert "restarts_left=1/1" in read_log(tmp_path, "again", 2)  # a new run, a new budget
    assert _cycles(tmp_path, "again") == [
        (0, "analysed", "failed"),
        (1, "analysed", "failed"),
        (2, "analysed", "failed"),
        (3, "analysed", "failed"),
    ]
    repo = _repo(tmp_path)
    try:
        assert repo.get_cycle("again", 0).verdict == verdict0
        assert repo.get_job("again").cycles == 4
    finally:
        repo.close()


def test_same_job_id_continues_from_the_log_folder_without_history(tmp_path: Path) -> None:
    args = job_args(tmp_path, "nodb", "--max-restarts", "1", "--ft-attribution-endpoint", "off")
    args += [str(WORKER), "--mode", "fail_always"]
    assert run_relaunch(tmp_path, args).returncode == 1
    assert run_relaunch(tmp_path, args).returncode == 1
    assert cycle_logs(tmp_path, "nodb") == [f"cycle_{n}.log" for n in range(4)]


TWO_NODE_WORKER = """
import datetime, os, sys
import torch.distributed as dist
from relaunch.launcher.client import heartbeat
heartbeat()
if int(os.environ["RANK"]) == 1:
    print("rank 1 gives up before joining the group", flush=True)
    sys.exit(7)
# rank 0 stays healthy until rank 1 is given up on: its node is restarted by elastic's
# membership change (not a failure of its own) or, at the end, fails after 10 s
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
"""


def test_two_nodes_share_one_cycle_number_and_restart_budget(tmp_path: Path) -> None:
    """Two launchers on loopback (one worker each). Only node 1's worker fails; node 0 is
    restarted because node 1 rejoins. Both must agree on every cycle's number and on the
    restarts left (job-wide), and both stop when the job's budget is spent."""
    script = tmp_path / "two.py"
    script.write_text(TWO_NODE_WORKER)
    args = ["--max-restarts", "2", "--workers-stop-timeout", "3", str(script)]
    codes, errs = run_two_nodes(tmp_path, "jw", args, timeout=200)
    assert codes == [1, 1], errs
    starts: dict[int, dict[int, str]] = {0: {}, 1: {}}
    restart_lines = 0
    for name in cycle_logs(tmp_path, "jw"):
        cycle, node = map(int, re.match(r"cycle_(\d+)\.node(\d)\.log", name).groups())
        text = (tmp_path / "logs" / "jw" / name).read_text()
        m = re.search(r"cycle (\d+) start: .* restarts_left=(\d+/\d+)", text)
        assert m and int(m.group(1)) == cycle, text
        starts[node][cycle] = m.group(2)
        for line in re.findall(r"\[relaunch\] restart: cycle .*", text):
            # no per-node count that could differ between the nodes (elastic counts only
            # the failing node's restarts): the agreed count is the next start line's
            assert line.endswith("(restarts left: agreed by the nodes at the next rendezvous)")
            restart_lines += 1
    assert restart_lines >= 2, errs  # both nodes restarted at least once
    assert starts[0] == starts[1], starts  # same cycles, same budget on both nodes
    assert starts[0] == {0: "2/2", 1: "1/2", 2: "0/2"}, starts


def _start(tmp_path: Path, job: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "relaunch.cli", "run"]
        + job_args(tmp_path, job, *extra)
        + [str(WORKER), "--mode", "sleep"],
        cwd=tmp_path,
        env=relaunch_env(tmp_path),
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal job
    )


def _wait_for_workers(tmp_path: Path, job: str, proc: subprocess.Popen[str]) -> list[int]:
    log = tmp_path / "logs" / job / "cycle_0.log"
    deadline = time.monotonic() + 120
    while not (log.exists() and "hello from rank 1" in log.read_text()):
        assert proc.poll() is None and time.monotonic() < deadline, "workers never started"
        time.sleep(0.2)
    return [int(p) for p in re.findall(r"pid (\d+)", log.read_text())]


def _assert_dead(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        raise AssertionError(f"worker {pid} still alive")


@pytest.mark.parametrize(
    "sig, to_group, twice",
    [
        (signal.SIGINT, True, False),
        (signal.SIGINT, True, True),
        (signal.SIGINT, False, False),
        (signal.SIGTERM, False, False),
    ],
)
def test_signal_ends_with_128_plus_n_and_flushes_history(
    tmp_path: Path, sig: signal.Signals, to_group: bool, twice: bool
) -> None:
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it; also twice, the
    second landing while the launcher stops the workers or exits), SIGINT and SIGTERM to
    the launcher alone: exit 128+N, never 134 or a death by the signal; workers stopped;
    the job and its cycle are recorded as interrupted. Three runs each."""
    for n in range(3):
        job = f"sig{n}"
        proc = _start(tmp_path, job)
        pids = _wait_for_workers(tmp_path, job, proc)
        if to_group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        if twice:  # an impatient second Ctrl-C, at some point of the teardown
            time.sleep(0.3 * n)
            if proc.poll() is None:
                os.killpg(proc.pid, sig)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 128 + sig, err
        assert "terminate called" not in err, err
        # the workers' own tracebacks (KeyboardInterrupt) are teed with their rank prefix
        assert not [ln for ln in err.splitlines() if ln.startswith("Traceback")], err
        assert f"received {sig.name}; workers stopped" in err
        _assert_dead(pids)
        rec = _job(tmp_path, job)
        assert (rec.state, rec.exit_code) == ("interrupted", 128 + sig), rec
        assert _cycles(tmp_path, job) == [(0, "ended", "interrupted")]
        assert "[relaunch] cycle 0 end: interrupted" in read_log(tmp_path, job, 0)


def test_bad_db_url_is_rejected_before_any_worker(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    for url in ("postgres://u@127.0.0.1/db", "not a url", "mysql://u@127.0.0.1/db"):
        r = run_relaunch(
            tmp_path,
            job_args(tmp_path, "baddb", "--ft-db-url", url)
            + [str(WORKER), "--mode", "ok", "--marker", str(marker)],
            timeout=60,
        )
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("relaunch run: error: --ft-db-url"), lines
        assert not marker.exists()
        assert cycle_logs(tmp_path, "baddb") == []
    r = run_relaunch(tmp_path, ["--rdzv-conf", "novalue", str(WORKER)], timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("relaunch run: error: --rdzv-conf")


def test_unusable_audit_hmac_key_is_rejected_before_any_worker(tmp_path: Path) -> None:
    """A key file that cannot be read would leave every artifact of the job unsigned."""
    import subprocess
    import sys

    from tests._launcher_helpers import relaunch_env

    marker = tmp_path / "marker"
    empty = tmp_path / "empty.key"
    empty.write_text("\n")
    for key, says in ((tmp_path / "missing.key", "cannot read"), (empty, "is empty")):
        env = relaunch_env(tmp_path)
        env["RELAUNCH_AUDIT_HMAC_KEY_FILE"] = str(key)
        r = subprocess.run(
            [sys.executable, "-m", "relaunch.cli", "run"]
            + job_args(tmp_path, "badkey")
            + [str(WORKER), "--mode", "ok", "--marker", str(marker)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "RELAUNCH_AUDIT_HMAC_KEY_FILE" in lines[0] and says in lines[0]
        assert not marker.exists()


def test_facts_name_the_killed_rank_first(tmp_path: Path) -> None:
    r = run_relaunch(
        tmp_path,
        job_args(tmp_path, "kill", "--ft-attribution-endpoint", "off")
        + [str(WORKER), "--mode", "crash_once"],
    )
    assert r.returncode == 0, r.stderr
    facts = _facts(read_log(tmp_path, "kill", 0))
    assert all(f["cycle"] == 0 for f in facts)
    exits = {f["rank"]: f for f in facts if f["fact"] == "rank_exit"}
    assert (exits[1]["exitcode"], exits[1]["signal"], exits[1]["first"]) == (-9, "SIGKILL", True)
    assert exits[1]["local_rank"] == 1 and exits[1]["node"] is None
    assert exits[0]["first"] is False and exits[0]["t_s"] >= exits[1]["t_s"]
    assert [f["ranks"] for f in facts if f["fact"] == "ranks_stopped"] == [[0]]
    (its,) = [f for f in facts if f["fact"] == "iterations"]
    # the worker reports iterations 0 and 1 through launcher.client before rank 1 dies
    assert its == {
        "fact": "iterations",
        "cycle": 0,
        "last": {"0": 1, "1": 1},
        "silent": [],
        "client": True,
    }
    (end,) = [f for f in facts if f["fact"] == "cycle_end"]
    assert end["outcome"] == "failed" and end["duration_s"] > 0
    (start,) = [f for f in facts if f["fact"] == "cycle_start"]
    assert (start["job"], start["ranks"], start["world_size"]) == ("kill", [0, 1], 2)
    ok = _facts(read_log(tmp_path, "kill", 1))
    assert [f["outcome"] for f in ok if f["fact"] == "cycle_end"] == ["succeeded"]
    assert [f["last"] for f in ok if f["fact"] == "iterations"] == [{"0": 3, "1": 3}]


def test_facts_of_a_hang(tmp_path: Path) -> None:
    r = run_relaunch(
        tmp_path,
        job_args(
            tmp_path, "hung", "--ft-attribution-endpoint", "off", "--ft-heartbeat-timeout", "2"
        )
        + [str(WORKER), "--mode", "hang_once"],
    )
    assert r.returncode == 0, r.stderr
    facts = _facts(read_log(tmp_path, "hung", 0))
    (hang,) = [f for f in facts if f["fact"] == "hang"]
    assert (hang["rank"], hang["initial"], hang["section"]) == (1, False, None)
    assert hang["silent_s"] >= 2.0
    (end,) = [f for f in facts if f["fact"] == "cycle_end"]
    assert end["outcome"] == "failed"


def test_facts_say_no_iteration_when_the_client_reported_none(tmp_path: Path) -> None:
    """A rank that talks to the launcher but reports no iteration is `silent`; a script
    that never imports launcher.client gives `client: false`."""
    script = _quick_failure(tmp_path)
    r = run_relaunch(
        tmp_path,
        job_args(tmp_path, "noclient", "--max-restarts", "0", "--ft-attribution-endpoint", "off")
        + [str(script)],
    )
    assert r.returncode == 1, r.stderr
    (its,) = [f for f in _facts(read_log(tmp_path, "noclient", 0)) if f["fact"] == "iterations"]
    assert its == {"fact": "iterations", "cycle": 0, "last": {}, "silent": [0, 1], "client": False}


def test_stop_verdict_is_only_logged_by_default(tmp_path: Path) -> None:
    """The seed's default: a STOP verdict is recorded and printed prominently; the job
    goes on until its budget is spent (exit 1)."""
    r = run_relaunch(
        tmp_path, job_args(tmp_path, "dflt", "--max-restarts", "2") + [str(WORKER), "--mode", "bug"]
    )
    assert r.returncode == 1, r.stderr
    assert cycle_logs(tmp_path, "dflt") == ["cycle_0.log", "cycle_1.log", "cycle_2.log"]
    assert re.search(r"\*\*\* STOP verdict for cycle \d+ .*recorded only", r.stderr), r.stderr
    assert "was recorded, not acted on" in r.stderr
    job = _job(tmp_path, "dflt")
    assert (job.state, job.exit_code) == ("failed", 1)


def test_a_crash_loop_faster_than_the_analysis_gate_is_still_stopped(tmp_path: Path) -> None:
    """Workers that die at once (before they ever talk to the launcher) must not starve the
    analyses: the STOP verdict arrives and ends the job long before its restart budget is
    spent (it used to run all 21 cycles and only then print every verdict)."""
    script = tmp_path / "early.py"
    script.write_text('raise ValueError("lr must be positive, got -0.1")\n')
    r = run_relaunch(
        tmp_path,
        job_args(
            tmp_path,
            "loop",
            "--max-restarts",
            "20",
            "--ft-attribution-stop-action",
            "no-restart",
        )
        + [str(script)],
        timeout=240,
    )
    assert r.returncode == 3, r.stderr[-3000:]
    assert len(cycle_logs(tmp_path, "loop")) < 21, r.stderr[-3000:]


def test_cycle_times_are_when_it_ran_not_when_the_records_were_written(tmp_path: Path) -> None:
    """Cycle 0 fails at once, before the history database is even open: its records wait in
    the client's queue, yet its stored start lies before its log was last written and its
    end after that, and cycle 1 starts after it ended."""
    from datetime import datetime, timezone

    script = tmp_path / "once.py"
    script.write_text(
        "import os, sys\nsys.exit(1 if os.environ.get('RELAUNCH_CYCLE') == '0' else 0)\n"
    )
    r = run_relaunch(tmp_path, job_args(tmp_path, "times") + [str(script)], timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    repo = _repo(tmp_path)
    try:
        c0, c1 = repo.list_cycles("times")[:2]
    finally:
        repo.close()
    log0 = tmp_path / "logs" / "times" / "cycle_0.log"
    written = datetime.fromtimestamp(log0.stat().st_mtime, timezone.utc)
    assert c0.started_at <= written <= c0.ended_at <= c1.started_at, (
        c0.started_at,
        written,
        c0.ended_at,
        c1.started_at,
    )
