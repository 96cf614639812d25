"""preflight(): GPU checks (real pynvml) and the external service combined in one report."""

from __future__ import annotations

import json

import pytest

from relaunch.launcher.health import CheckResult, HealthReport, preflight
from relaunch.launcher.health.nvml import NvmlOptions
from tests._health_helpers import start_health_service

FAST = NvmlOptions(window_s=0.2, samples=3)


def test_gpu_and_healthy_service() -> None:
    with start_health_service("healthy") as ep:
        report = preflight(endpoint=ep, nvml_options=FAST, node="node-a")
    names = [c.name for c in report.checks]
    assert names[0] == "nvml" and names[-1] == "external_service"
    assert report.healthy is True
    assert report.node == "node-a"
    d = json.loads(json.dumps(report.to_dict()))
    assert d["healthy"] is True and d["node"] == "node-a"
    assert d["checks"][-1]["status"] == "ok"
    assert d["duration_s"] >= 0


def test_gpu_and_failing_service_is_unhealthy_with_reason() -> None:
    with start_health_service("fail_count") as ep:
        report = preflight(endpoint=ep, nvml_options=FAST)
    assert report.healthy is False
    assert [c.name for c in report.failed_checks] == ["external_service"]
    assert report.reason == "external_service: health service reported 2 failed check(s)"
    assert report.to_dict()["reason"] == report.reason


def test_no_checks_requested() -> None:
    report = preflight(gpu=False)
    assert report.healthy is True and report.checks == []


def test_report_reasons() -> None:
    ok = CheckResult("a", "ok")
    na = CheckResult("b", "not_available", "no driver")
    err = CheckResult("c", "error", "boom")
    bad = CheckResult("d", "fail", "ECC")
    assert HealthReport.from_checks([ok, na]).reason == "all available health checks passed"
    assert HealthReport.from_checks([na]).reason == "no health checks available on this node"
    r = HealthReport.from_checks([ok, err])
    assert r.healthy and r.reason == "no check failed; failing open after errors: c: boom"
    r = HealthReport.from_checks([ok, err, bad, CheckResult("e", "fail")])
    assert not r.healthy and r.reason == "d: ECC; e"


def test_check_status_is_validated() -> None:
    with pytest.raises(ValueError, match="unknown check status 'bad'"):
        CheckResult("x", "bad")  # type: ignore[arg-type]


def test_exclusion_record_names_the_cycle_and_the_node(tmp_path) -> None:
    import json

    from relaunch.launcher.health import exclusion_record, write_record
    from relaunch.launcher.health.report import CheckResult, HealthReport

    report = HealthReport.from_checks(
        [CheckResult("external_service", "fail", "x" * 5000)], node="gpu-17"
    )
    cycle, rec = exclusion_record(report, last_cycle=3, node_index=1)
    assert cycle == 3
    assert (rec["node"], rec["host"], rec["ran_this_cycle"], rec["excluded_from_cycle"]) == (
        "node1",
        "gpu-17",
        True,
        4,
    )
    assert len(rec["reason"]) == 2000  # bounded: the service takes up to 4,000 characters
    path = write_record(tmp_path, rec)
    assert path == tmp_path / "node_health" / "node1.cycle_4.json"
    assert json.loads(path.read_text()) == rec
    # before its first cycle a node knows no cycle of the job: nothing to attach to
    cycle, rec = exclusion_record(report, last_cycle=-1, node_index=None)
    assert cycle is None and rec["node"] == "gpu-17" and rec["excluded_from_cycle"] is None
    assert write_record(tmp_path, rec).name == "gpu-17.first.json"
