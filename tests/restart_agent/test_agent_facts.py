"""Launcher facts as evidence (issue 18 item 3): the reader side of the `[relaunch] fact:`
contract, with synthetic fact lines (the launcher's writer is tested in the launcher's tests)."""

from __future__ import annotations

import json

import pytest

from relaunch.restart_agent import decide
from relaunch.restart_agent.facts import parse_fact
from relaunch.restart_agent.model import LauncherFacts
from tests._agent_helpers import fact, random_chunkings, scan_chunked, scan_text

WATCHDOG = "".join(
    f"[rank{r}]: [E1202 10:21:13 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective"
    f" operation timeout: WorkNCCL(SeqNum=8, OpType=ALLREDUCE) ran for 600123 milliseconds before timing out.\n"
    for r in (0, 1, 2, 3, 4, 6, 7)
)
SIGKILL_5 = (
    fact("cycle_start", job="j", node="n0", ranks=list(range(8)), world_size=8, t=1.0)
    + "[rank0]: step 1 | loss 2\n"
    + fact(
        "rank_exit",
        rank=5,
        local_rank=5,
        node="n0",
        exitcode=-9,
        signal="SIGKILL",
        first=True,
        t_s=812.5,
    )
    + WATCHDOG
    + fact(
        "rank_exit",
        rank=1,
        local_rank=1,
        node="n0",
        exitcode=-15,
        signal="SIGTERM",
        first=False,
        t_s=815.0,
    )
    + fact("ranks_stopped", ranks=[0, 1, 2, 3, 4, 6, 7])
    + fact("iterations", last={"0": 120, "1": 120}, silent=[5], client=True)
    + fact("cycle_end", outcome="failed", duration_s=816.2)
)


def test_sigkilled_rank_without_traceback_is_the_primary_named_by_the_launcher() -> None:
    ev = scan_text(SIGKILL_5)
    facts = ev.launcher
    assert facts is not None and facts.facts == 6
    assert facts.first_failing_rank == 5 and facts.world_size == 8
    assert facts.iterations == {0: 120, 1: 120} and facts.silent_ranks == [5]
    assert facts.duration_s == 816.2 and facts.outcome == "failed"
    v = decide(ev)
    assert v.primary.rank == 5 and v.primary.rank_source == "launcher"
    assert v.primary.failure_class == "killed_sigkill" and v.primary.role == "root"
    assert (v.decision, v.rule) == ("RESTART", "restart.infrastructure")
    assert "not in the log" not in v.basis
    assert "Blamed rank 5 (from the launcher's facts)" in v.basis
    assert v.fan_out.rank_source == "launcher"
    assert v.fan_out.launcher is not None and v.fan_out.launcher["first_failing_rank"] == 5
    assert v.progress.last_iteration == 120 and v.progress.duration_s == 816.2


def test_the_launchers_first_rank_beats_an_earlier_root_on_another_rank() -> None:
    text = (
        "[rank0]: RuntimeError: [0] store->get('x') got something odd\n"
        "[rank3]: ValueError: bad value in loss\n"
        + fact("rank_exit", rank=3, exitcode=1, first=True, t_s=3.0)
    )
    v = decide(scan_text(text))
    assert v.primary.rank == 3 and v.primary.failure_class == "python_value_error"


def test_an_unranked_root_gets_the_launchers_first_rank() -> None:
    text = "RuntimeError: CUDA error: unspecified launch failure\n" + fact(
        "rank_exit", rank=6, exitcode=1, first=True, t_s=3.0
    )
    v = decide(scan_text(text))
    assert (v.primary.rank, v.primary.rank_source) == (6, "launcher")
    assert v.primary.failure_class == "cuda_launch_failure"


def test_hang_fact_is_a_hang_detected_root_on_that_rank() -> None:
    text = WATCHDOG + fact(
        "hang", rank=5, silent_s=600.0, section="forward", initial=False, others=[]
    )
    v = decide(scan_text(text))
    assert v.primary.failure_class == "hang_detected" and v.primary.rank == 5
    assert v.primary.rank_source == "launcher" and v.primary.entity == "forward"
    assert v.primary.domain == "infrastructure"


MALFORMED = [
    "[relaunch] fact: not json",
    "[relaunch] fact: [1, 2]",
    '[relaunch] fact: {"cycle": 0}',
    '[relaunch] fact: {"fact": "rank_exit", "cycle": 0, "rank": "five", "exitcode": -9}',
    '[relaunch] fact: {"fact": "rank_exit", "cycle": 0, "rank": 1e400, "first": true}',
    '[relaunch] fact: {"fact": "rank_exit", "cycle": 0, "rank": ' + "9" * 5000 + ', "first": true}',
    '[relaunch] fact: {"fact": "rank_exit", "cycle": 0, "rank": 18446744073709551616, "first": true}',
    "[relaunch] fact: " + "[" * 100000 + "]" * 100000,
    '[relaunch] fact: {"fact": "__init__", "cycle": 0}',
    '[relaunch] fact: {"fact": "no_such_kind", "cycle": 0}',
    '[relaunch] fact: {"fact": "iterations", "cycle": 0, "last": {"²": 5, "99999999999": 1, "3": -4}}',
    '[relaunch] fact:{"fact": "rank_exit", "cycle": 0, "rank": 2, "exitcode": -9, "first": true}',
]


@pytest.mark.parametrize("line", MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_fact_lines_are_ignored_never_a_crash(line: str) -> None:
    ev = scan_text(line + "\n" + WATCHDOG)
    assert ev.launcher is None or ev.launcher.first_failing_rank is None
    assert ev.launcher is None or ev.launcher.iterations == {}
    v = decide(ev)
    assert v.rule == "restart.cascade_only"


def test_a_worker_cannot_forge_a_fact() -> None:
    forged = '[rank2]: [relaunch] fact: {"fact":"rank_exit","cycle":0,"rank":2,"exitcode":-9,"first":true}\n'
    assert parse_fact(forged.rstrip("\n")) is None
    ev = scan_text(forged + "2: " + forged[9:] + WATCHDOG)
    assert ev.launcher is None


def test_facts_read_the_same_whatever_the_chunking() -> None:
    data = SIGKILL_5.encode() * 3
    want = scan_text(data).launcher
    for sizes in random_chunkings(7, 12, 300):
        assert scan_chunked(data, sizes).launcher == want


def test_launcher_facts_round_trip_through_json() -> None:
    facts = scan_text(SIGKILL_5).launcher
    back = LauncherFacts.from_dict(json.loads(json.dumps(facts.to_dict())))
    assert back == facts


def _first_exit_then_root(signal: str, exitcode: int) -> str:
    """Rank 0 raises a workload error; the launcher saw rank 1 die first, by `signal`."""
    return (
        fact("cycle_start", job="j", node="n0", ranks=[0, 1], world_size=2, t=1.0)
        + fact(
            "rank_exit",
            rank=1,
            local_rank=1,
            node="n0",
            exitcode=exitcode,
            signal=signal,
            first=True,
            t_s=3.0,
        )
        + "[rank0]: Traceback (most recent call last):\n"
        + '[rank0]:   File "/work/train.py", line 40, in <module>\n'
        + "[rank0]: ValueError: Corrupted sample at index 123 in shard /data/part-7.bin\n"
        + fact(
            "rank_exit",
            rank=0,
            local_rank=0,
            node="n0",
            exitcode=1,
            signal=None,
            first=True,
            t_s=3.2,
        )
        + fact("cycle_end", outcome="failed", duration_s=3.5)
    )


def test_a_peer_that_aborted_first_does_not_hide_the_logs_root_error() -> None:
    """gloo/NCCL abort a rank (SIGABRT) when its peer goes away; exit times can put that
    abort first. The log's own root error (rank 0's bad sample) stays the primary."""
    v = decide(scan_text(_first_exit_then_root("SIGABRT", -6)))
    assert v.primary.failure_class == "bad_sample" and v.primary.rank == 0
    assert v.primary.rank_source == "prefix"


def test_a_rank_killed_first_by_sigkill_still_replaces_the_logs_root() -> None:
    v = decide(scan_text(_first_exit_then_root("SIGKILL", -9)))
    assert v.primary.failure_class == "killed_sigkill" and v.primary.rank == 1
    assert v.primary.rank_source == "launcher"
