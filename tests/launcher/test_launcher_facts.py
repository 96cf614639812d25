"""Units of the launcher's truth: fact lines (`launcher.facts`), where a job id continues
and the job-wide agreement over a real c10d TCPStore (`launcher.jobwide`)."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from pathlib import Path

from relaunch.launcher import facts
from relaunch.launcher.jobwide import Proposal, agree, next_cycle_in
from relaunch.restart_agent.facts import verified


def _body(line: str) -> dict:
    assert line.startswith("fact: {")
    text = line[len("fact: ") :]
    assert " " not in text.replace('"sleep 1"', "")  # compact JSON
    body = json.loads(text)
    # signed by this launcher process with its cycle's key, which signs no other cycle
    assert verified(text, [facts.cycle_key(body["cycle"])])  # (issue 26)
    assert not verified(text, [facts.cycle_key(body["cycle"] + 1), facts.key()])
    del body["mac"]
    return body


def test_fact_lines_are_compact_json_with_kind_and_cycle_first() -> None:
    line = facts.rank_exit(3, rank=5, local_rank=1, node=2, exitcode=-9, first=True, t_s=1.23456)
    body = _body(line)
    assert list(body)[:2] == ["fact", "cycle"]
    assert body == {
        "fact": "rank_exit",
        "cycle": 3,
        "rank": 5,
        "local_rank": 1,
        "node": 2,
        "exitcode": -9,
        "signal": "SIGKILL",
        "first": True,
        "t_s": 1.235,
    }
    assert _body(facts.rank_exit(0, 0, 0, None, 7, False, 0.0))["signal"] is None
    assert _body(facts.rank_exit(0, 0, 0, None, -200, False, 0.0))["signal"] == "SIG200"


def test_iterations_cycle_end_and_non_finite_values() -> None:
    body = _body(facts.iterations(1, {3: 10, 2: 7}, ranks=[2, 3, 4], client=True))
    assert body == {
        "fact": "iterations",
        "cycle": 1,
        "last": {"2": 7, "3": 10},
        "silent": [4],
        "client": True,
    }
    assert _body(facts.cycle_end(1, "interrupted", 2.0))["outcome"] == "stopped"
    assert _body(facts.cycle_end(1, "succeeded", 2.0))["outcome"] == "succeeded"
    assert _body(facts.hang(1, 2, float("nan"), None, True, [0]))["silent_s"] is None
    start = _body(facts.cycle_start(0, "j", None, [1, 0], 2, 5.0))
    assert (start["ranks"], start["node"], start["t"]) == ([0, 1], None, 5.0)


def test_next_cycle_in_reads_single_and_multi_node_logs(tmp_path: Path) -> None:
    assert next_cycle_in(tmp_path / "missing") == 0
    assert next_cycle_in(tmp_path) == 0
    for name in ("cycle_0.log", "cycle_3.node1.log", "cycle_x.log", "cycle_9.log.gz", "a.txt"):
        (tmp_path / name).write_text("")
    assert next_cycle_in(tmp_path) == 4


def test_agree_takes_the_max_over_the_nodes_through_a_tcpstore() -> None:
    from torch.distributed import TCPStore

    server = TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=60), wait_for_workers=False)
    stores = [server] + [
        TCPStore("127.0.0.1", server.port, None, False, timedelta(seconds=60)) for _ in range(2)
    ]
    proposals = [Proposal(2, 0), Proposal(5, 1), Proposal(3, 2)]
    results: list[Proposal | None] = [None] * 3

    def node(i: int) -> None:
        results[i] = agree(stores[i], i, 3, proposals[i], tag="r1")

    threads = [threading.Thread(target=node, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results == [Proposal(5, 2)] * 3
    assert agree(server, 0, 1, Proposal(7, 0)) == Proposal(7, 0)  # one node: nothing to ask


def test_embedded_client_flushes_everything_queued_on_close(tmp_path: Path) -> None:
    """Close right after queuing: the database is opened, migrated and written before the
    close returns (it waits for the budgets of the work queued, not a fixed 2 s)."""
    from relaunch.launcher.attribution_client import EmbeddedClient
    from relaunch.storage import open_repository

    warnings: list[str] = []
    url = f"sqlite:///{tmp_path / 'h.db'}"
    client = EmbeddedClient(lambda v: None, warnings.append, db_url=url)
    log = tmp_path / "cycle_0.log"
    log.write_text("[rank0]: Traceback (most recent call last):\n[rank0]: ValueError: boom\n")
    client.register("flush", 0, str(log), None)
    client.end_cycle("flush", 0, "failed", "rank 0 exited with code 1")
    client.request_analysis("flush", 0, str(log), None)
    client.end_job("flush", "failed", 1, "restart budget (0) spent")
    assert client.budget_left() > 60  # the database open, three writes, one analysis
    assert client.close() is True
    assert warnings == []
    repo = open_repository(url)
    try:
        job, cyc = repo.get_job("flush"), repo.get_cycle("flush", 0)
    finally:
        repo.close()
    assert (job.state, job.exit_code) == ("failed", 1)
    assert (cyc.status, cyc.outcome, cyc.decision) == ("analysed", "failed", "RESTART")


def test_an_abandoned_flush_returns_at_once_and_says_so(tmp_path: Path) -> None:
    from relaunch.launcher.attribution_client import EmbeddedClient

    warnings: list[str] = []
    hold = threading.Event()
    client = EmbeddedClient(
        lambda v: None, warnings.append, db_url=f"sqlite:///{tmp_path / 'h.db'}"
    )
    assert client.stored_next_cycle("none").result(120) == 0  # the database is open
    client._submit(lambda: hold.wait(60), gated=False)  # a task that does not end by itself
    client.abandon()  # a second Ctrl-C
    assert client.close() is False
    hold.set()
    assert any("abandoned at exit" in w for w in warnings), warnings


def test_exit_times_order_real_processes_without_reaping_them() -> None:
    import subprocess
    import sys
    import time

    from relaunch.launcher.exit_times import ExitTimes

    first = subprocess.Popen([sys.executable, "-c", "pass"])
    second = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    times = ExitTimes({0: first.pid, 1: second.pid})
    deadline = time.monotonic() + 60
    while times.get(0) is None:  # the first exits on its own
        assert time.monotonic() < deadline, "exit of the first process not seen"
        time.sleep(0.05)
    assert times.get(1) is None
    second.stdin.close()  # now the second exits: strictly later
    while times.get(1) is None:
        assert time.monotonic() < deadline, "exit of the second process not seen"
        time.sleep(0.05)
    assert times.get(0) < times.get(1)
    assert (first.wait(10), second.wait(10)) == (0, 0)  # elastic can still reap them
    times.close()
