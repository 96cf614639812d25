"""Workers cannot forge the launcher's facts (issue 26, item 2), through a real `relaunch run`.

`tests/workers/forger_job.py`: rank 0 really fails (ValueError after iteration 3); rank 1
tries the four forging channels (a checkpoint value with line breaks, a raw datagram with a
string iteration, lines appended to the cycle log file, datagrams claiming ranks 0 and 7).
Each forged value says 987654. What each gets: the first two are escaped inside one
`[relaunch] progress` line (no line of the log starts with a forged fact), the third is a
line without a valid MAC (counted as forged, ignored), the fourth is dropped by the
heartbeat server (the kernel says which pid sent it). The verdict blames rank 0's
ValueError, no iteration 987654 is believed and no hang of rank 7 is reported.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from relaunch.launcher import facts as launcher_facts
from relaunch.launcher.heartbeat import HeartbeatServer, RankMonitor
from relaunch.launcher.heartbeat_message import clean_message
from relaunch.restart_agent.facts import FactCollector, verified, verifying
from tests._launcher_helpers import REPO, engine_available, job_args, read_log, run_relaunch

FORGER = REPO / "tests" / "workers" / "forger_job.py"


def test_fact_lines_are_signed_and_only_signed_lines_count_when_verifying() -> None:
    line = "[relaunch] " + launcher_facts.cycle_end(2, "failed", 1.5)
    assert verified(line[len("[relaunch] fact: ") :], [launcher_facts.cycle_key(2)])
    forged = '[relaunch] fact: {"fact":"cycle_end","cycle":2,"outcome":"succeeded"}'
    tampered = line.replace('"failed"', '"succeeded"')
    with verifying([launcher_facts.cycle_key(2)]):
        c = FactCollector()
    assert c.line(line, 1) and not c.line(forged, 2) and not c.line(tampered, 3)
    assert (c.result().outcome, c.forged) == ("failed", 2)  # type: ignore[union-attr]
    plain = FactCollector()  # no key given (relaunch analyze FILE): trusted by prefix
    assert plain.line(forged, 1) and plain.forged == 0


def test_worker_values_are_typed_bounded_and_escaped() -> None:
    msg = clean_message(
        {"r": 1, "c": 0, "k": "progress", "i": "5\n[relaunch] fact: {}", "ckpt": "a\u2028b\nc"}
    )
    assert msg is not None and "i" not in msg
    assert msg["ckpt"] == "a\\u2028b\\x0ac" and len(msg["ckpt"].splitlines()) == 1
    assert clean_message({"r": 1, "c": 0, "k": "progress", "i": 2**70}) == {
        "r": 1, "c": 0, "k": "progress"
    }  # fmt: skip
    for bad in ({"r": "0", "k": "hb"}, {"r": -1, "k": "hb"}, {"r": 1, "k": "x"}, [1], "hb"):
        assert clean_message(bad) is None
    long = clean_message({"r": 0, "c": 0, "k": "sec_start", "s": "s" * 10_000})
    assert long is not None and len(long["s"]) == 200


def test_a_checkpoint_report_keeps_its_typed_fields() -> None:
    """client.report_checkpoint's datagram survives cleaning (relaunch.checkpoint's facts and
    the restart's resume point depend on it); bad values become neutral, never raw."""
    sent = {"r": 0, "c": 1, "k": "progress", "ckpt": "/c/step_3", "cs": 3, "ct": "persistent"}
    msg = clean_message({**sent, "cb": 4096, "cd": 0.25})
    assert msg == {**sent, "cb": 4096, "cd": 0.25}
    odd = clean_message({**sent, "ct": "x\ny", "cb": -1, "cd": float("nan")})
    assert odd is not None and (odd["ct"], odd["cb"], odd["cd"]) == ("x\\x0ay", 0, 0.0)
    assert "cs" not in (clean_message({**sent, "cs": "3"}) or {})  # a step must be an int
    huge = clean_message({**sent, "cd": 10**400})  # float() of it would overflow
    assert huge is not None and huge["cd"] == 0.0


def test_a_datagram_counts_only_from_the_pid_of_the_rank_it_names(tmp_path: Path) -> None:
    """This test process is the 'worker' of rank 3: it can speak for rank 3, not rank 4;
    datagrams sent before the pids are known wait and are judged then."""
    import os

    seen: list[tuple[int, dict]] = []
    server = HeartbeatServer(on_progress=lambda c, r, m: seen.append((r, m)))
    try:
        mon = RankMonitor(cycle=0, heartbeat_timeout=60, initial_timeout=60)
        server.start_cycle(mon, authenticated=True)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            for r in (3, 4):
                s.sendto(
                    json.dumps({"r": r, "c": 0, "k": "progress", "i": r}).encode(), server.path
                )
            assert server.sync(timeout=30)
            assert seen == [] and mon.ranks_seen() == set()  # held: pids not known yet
            server.set_workers({os.getpid(): 3})
            s.sendto(json.dumps({"r": 4, "c": 0, "k": "hb"}).encode(), server.path)
            assert server.sync(timeout=30)
        assert [r for r, _ in seen] == [3] and mon.ranks_seen() == {3}
        assert server.rejected == 2
    finally:
        server.close()


def _verdict(tmp_path: Path, job: str, cycle: int, db_url: str | None = None) -> dict:
    from relaunch.storage import open_repository

    repo = open_repository(db_url or f"sqlite:///{tmp_path / 'home' / 'relaunch.db'}")
    try:
        rec = repo.get_cycle(job, cycle)
    finally:
        repo.close()
    assert rec is not None and rec.verdict is not None, "cycle not analysed"
    return rec.verdict if isinstance(rec.verdict, dict) else json.loads(rec.verdict)


def test_four_forging_channels_do_not_change_the_verdict(tmp_path: Path) -> None:
    if (why := engine_available()) is not None:
        pytest.skip(why)
    logs = tmp_path / "logs" / "forge"
    args = job_args(tmp_path, "forge", "--max-restarts", "0", "--ft-initial-heartbeat-timeout", "5")
    proc = run_relaunch(tmp_path, [*args, str(FORGER), str(logs)], timeout=240)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    log = read_log(tmp_path, "forge", 0)
    assert "forger: all four channels tried" in log
    assert "hang detected" not in log  # the hello for rank 7 was not believed
    # channel 3 left its 3 unsigned lines; channels 1 and 2 left no line of their own:
    # whichever way the log is split, exactly 3 fact lines lack a MAC
    for lines in (log.split("\n"), log.splitlines()):
        unsigned = [
            ln for ln in lines if ln.startswith("[relaunch] fact: ") and '"mac":"' not in ln
        ]
        assert len(unsigned) == 3, unsigned
    # channels 1 and 2: the values arrive escaped inside one progress line
    progress = [ln for ln in log.split("\n") if ln.startswith("[relaunch] progress rank=1")]
    assert any("checkpoint=/ck\\x0a[relaunch] fact:" in ln for ln in progress), progress
    assert any("/ck\\u2028[relaunch] fact:" in ln for ln in progress), progress
    assert not any("iteration=5" in ln for ln in progress)  # the string iterations dropped
    assert "progress rank=0 iteration=987654" not in log  # channel 4: rank 1 spoke for 0
    launcher = _verdict(tmp_path, "forge", 0)["fan_out"]["launcher"]
    assert launcher["first_failing_rank"] == 0 and launcher["hangs"] == []
    assert launcher["iterations_max"] == 4  # rank 1's own real report, not 987654
    assert launcher["facts"] == 6  # the launcher's signed lines only
    assert {e["rank"]: e["first"] for e in launcher["exits"]} == {0: True, 1: False}
    verdict = _verdict(tmp_path, "forge", 0)
    assert verdict["primary"]["rank"] == 0 and "ValueError" in verdict["primary"]["text"]


def test_a_forged_fact_line_does_not_change_the_services_verdict(tmp_path: Path) -> None:
    """The same forger under `relaunch serve` (loopback): the launcher hands the cycle's fact
    key to the service at the cycle's end, and the service's verdict counts only the
    launcher's signed lines. Trusted by prefix, the appended lines would add 3 facts, make
    rank 1 the first failing rank (its forged exit at 0.001 s) and iteration 987654."""
    if (why := engine_available()) is not None:
        pytest.skip(why)
    from tests._service_helpers import running_service

    logs = tmp_path / "logs" / "forge-svc"
    with running_service(tmp_path) as svc:
        args = job_args(
            tmp_path, "forge-svc", "--max-restarts", "0", "--ft-initial-heartbeat-timeout", "5",
            "--ft-attribution-endpoint", svc.endpoint,
        )  # fmt: skip
        proc = run_relaunch(tmp_path, [*args, str(FORGER), str(logs)], timeout=240)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1, out
        log = read_log(tmp_path, "forge-svc", 0)
        assert "forger: all four channels tried" in log
        unsigned = [ln for ln in log.split("\n") if ln.startswith("[relaunch] fact: ")]
        assert sum('"mac":"' not in ln for ln in unsigned) == 3  # the forged lines are there
        verdict = _verdict(tmp_path, "forge-svc", 0, svc.db_url)
    launcher = verdict["fan_out"]["launcher"]
    assert launcher["facts"] == 6, launcher  # the launcher's signed lines only
    assert launcher["first_failing_rank"] == 0 and launcher["hangs"] == []
    assert launcher["iterations_max"] == 4
    assert verdict["primary"]["rank"] == 0 and "ValueError" in verdict["primary"]["text"]


def test_the_service_keeps_one_fact_key_per_node_and_checks_its_form() -> None:
    """A second, different key for the same cycle (and node) is refused; a key of another
    form is refused; a cycle without a key trusts facts by prefix (no context)."""
    from relaunch.attribution.core.fact_keys import FactKeys, KeyConflict, parse_key
    from relaunch.restart_agent.facts import trusted_keys

    keys = FactKeys(max_cycles=2)
    a, b = launcher_facts.cycle_key(0), launcher_facts.cycle_key(1)
    assert a != b and parse_key(a.hex()) == a
    for bad in ("", a.hex().upper(), a.hex()[:-1], "z" * 64):
        with pytest.raises(ValueError, match="64 lowercase hex"):
            parse_key(bad)
    keys.add("j", 0, None, a)
    keys.add("j", 0, None, a)  # the same key again: fine (a retried request)
    with pytest.raises(KeyConflict, match="different fact key"):
        keys.add("j", 0, None, b)
    keys.add("j", 0, "node1", b)  # another node of the cycle: its own key
    assert set(keys.keys("j", 0) or ()) == {a, b}
    with keys.context("j", 0):
        assert set(trusted_keys() or ()) == {a, b}
    with keys.context("j", 5):
        assert trusted_keys() is None
    keys.add("j", 1, None, b)
    keys.add("j", 2, None, b)  # bounded: the oldest cycle is forgotten
    assert keys.keys("j", 0) is None and keys.keys("j", 2) == (b,)


def test_the_service_refuses_a_second_fact_key_and_a_malformed_one(service_factory) -> None:
    """What each bad `fact_key` gets over HTTP: another form 400, a different key for a
    cycle (or a node of it) that has one 409 `conflict`; the same key again is accepted."""
    svc = service_factory()
    log = svc.root / "k" / "cycle_0.log"
    log.parent.mkdir(parents=True)
    log.write_text("hello\n")
    a, b = launcher_facts.cycle_key(0).hex(), launcher_facts.cycle_key(1).hex()
    body = {"log_path": str(log), "job_id": "k", "cycle_id": 0, "analysis_intent": "track_only"}
    with svc.client() as c:
        bad = c.post("/logs", json={**body, "fact_key": a.upper()})
        assert bad.status_code == 400, bad.text
        assert c.post("/logs", json={**body, "fact_key": a}).status_code == 200
        assert c.post("/logs", json={**body, "fact_key": a}).status_code == 200
        again = c.post("/logs", json={**body, "fact_key": b})
        assert again.status_code == 409 and "different fact key" in again.text, again.text
        url = "/v1/jobs/k/cycles/1/nodes/node0"
        assert c.post(url, json={"log_path": str(log), "nodes": 2}).status_code == 200
        assert c.post(url + "/end", json={"fact_key": a}).status_code == 200
        other = c.post(url + "/end", json={"fact_key": b})
        assert other.status_code == 409, other.text
