"""Node-health reports in the verdict policy: recorded always, and a ceiling STOP becomes
one more RESTART when a node that ran the cycle failed its health check after it."""

from __future__ import annotations

import pytest

from relaunch.restart_agent import NodeHealthNote, decide
from tests._agent_helpers import scan_text
from tests.restart_agent.test_agent_policy import CUDA, KEYERR, log, prior, verdict

SICK = NodeHealthNote(
    node="node1",
    healthy=False,
    reason="external_service: ib check failed",
    ran_this_cycle=True,
    excluded_from_cycle=4,
    failed_checks=("external_service",),
)


def _ceiling_history() -> list:
    return [prior(i, CUDA, 50) for i in range(3)]


def test_same_root_ceiling_with_a_sick_node_that_ran_restarts_once_more() -> None:
    hist = _ceiling_history()
    assert verdict(CUDA, 50, hist).rule == "stop.same_root_ceiling"  # the baseline
    v = decide(_evidence(CUDA, 50), hist, node_health=[SICK])
    assert (v.decision, v.rule) == ("RESTART", "restart.unhealthy_node_excluded")
    assert "node1" in v.basis and "ib check failed" in v.basis
    assert "Would stop" in v.basis
    d = v.to_dict()
    assert d["node_health"] == [SICK.to_dict()]
    assert d["node_health"][0]["failed_checks"] == ["external_service"]


def test_workload_recurrence_with_a_sick_node_restarts() -> None:
    hist = [prior(0, KEYERR, 50)]
    v = decide(_evidence(KEYERR, 50), hist)
    assert v.rule == "stop.workload_recurrence"
    v = decide(_evidence(KEYERR, 50), hist, node_health=[SICK])
    assert (v.decision, v.rule) == ("RESTART", "restart.unhealthy_node_excluded")


def test_a_node_that_never_joined_does_not_excuse_the_failure() -> None:
    absent = NodeHealthNote("node2", False, "nvml: 3 retired pages", ran_this_cycle=False)
    v = decide(_evidence(CUDA, 50), _ceiling_history(), node_health=[absent])
    assert (v.decision, v.rule) == ("STOP", "stop.same_root_ceiling")
    assert "node2" in v.basis  # still recorded and said
    assert v.to_dict()["node_health"][0]["node"] == "node2"


def test_immediate_stops_stay_stops() -> None:
    syntax = "[rank0]: SyntaxError: invalid syntax\n"
    v = decide(_evidence(syntax, None), (), node_health=[SICK])
    assert (v.decision, v.rule) == ("STOP", "stop.certain_workload_bug")
    assert "node1" in v.basis


def test_restart_verdicts_keep_their_rule_and_name_the_node() -> None:
    v = decide(_evidence(CUDA, 50), (), node_health=[SICK])
    assert (v.decision, v.rule) == ("RESTART", "restart.infrastructure")
    assert "Node node1 failed its health check and is left out of cycle 4" in v.basis


def test_healthy_reports_are_recorded_without_changing_anything() -> None:
    ok = NodeHealthNote("node0", True, "all available health checks passed", True)
    base = decide(_evidence(CUDA, 50), _ceiling_history())
    v = decide(_evidence(CUDA, 50), _ceiling_history(), node_health=[ok])
    assert (v.decision, v.rule, v.basis) == (base.decision, base.rule, base.basis)
    assert v.to_dict()["node_health"] == [ok.to_dict()]
    assert base.to_dict()["node_health"] == []


def test_note_from_a_launcher_record() -> None:
    record = {
        "node": 1,
        "host": "gpu-17",
        "healthy": False,
        "reason": "nvml: GPU 3 has 2 retired pages",
        "ran_this_cycle": True,
        "excluded_from_cycle": 2,
        "checks": [
            {"name": "nvml.retired_pages", "status": "fail", "detail": "2"},
            {"name": "nvml.ecc", "status": "ok", "detail": ""},
        ],
    }
    n = NodeHealthNote.from_dict(record)
    assert n == NodeHealthNote(
        "1", False, "nvml: GPU 3 has 2 retired pages", True, 2, ("nvml.retired_pages",)
    )
    assert NodeHealthNote.from_dict(n.to_dict()) == n


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"healthy": False}, "'node'"),
        ({"node": "", "healthy": False}, "'node'"),
        ({"node": True, "healthy": False}, "'node'"),
        ({"node": "n"}, "'healthy'"),
        ({"node": "n", "healthy": "no"}, "'healthy'"),
    ],
)
def test_bad_note_records_are_refused_with_the_reason(record: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NodeHealthNote.from_dict(record)


def _evidence(text: str, last_it: int | None):
    return scan_text(log(text, last_it))


def test_invalid_device_ordinal_on_a_node_that_lost_a_gpu_restarts_without_it() -> None:
    # `invalid device ordinal` leans workload (more processes than GPUs: STOP on the
    # identical recurrence); a node whose GPU fell off fails its health check, and then the
    # recurrence is that node's: one more RESTART without it
    import json

    from relaunch.restart_agent import PriorCycle

    text = (
        "[rank5]: Traceback (most recent call last):\n"
        '[rank5]:   File "/home/u/train.py", line 10, in main\n'
        "[rank5]: RuntimeError: CUDA error: invalid device ordinal\n"
    )
    first = decide(scan_text(text), [])
    hist = [PriorCycle.from_verdict(0, json.loads(json.dumps(first.to_dict())))]
    assert decide(scan_text(text), hist).decision == "STOP"
    v = decide(scan_text(text), hist, node_health=[SICK])
    assert (v.decision, v.rule) == ("RESTART", "restart.unhealthy_node_excluded")
