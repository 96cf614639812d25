"""External node-health service: a real gRPC server on a Unix socket in its own process."""

from __future__ import annotations

import logging
import os
import tempfile
import time

import pytest

from relaunch.launcher.health import preflight
from relaunch.launcher.health.external import (
    ExternalHealthClient,
    external_check,
    interpret_response,
    normalize_endpoint,
)
from tests._health_helpers import start_health_service


def test_healthy_service() -> None:
    with start_health_service("healthy") as ep:
        c = external_check(ep, args=["--quick"])
    assert c.status == "ok"
    assert c.data["output"]["args"] == ["--quick"]  # the request really reached the server
    assert c.data["endpoint"] == ep


def test_explicit_failure_is_unhealthy() -> None:
    with start_health_service("failing") as ep:
        report = preflight(gpu=False, endpoint=ep)
    assert report.healthy is False
    (c,) = report.checks
    assert c.status == "fail"
    assert "ib check failed" in c.detail
    assert "external_service" in report.reason
    assert report.to_dict()["checks"][0]["data"]["output"]["checks"]["ib"] == "fail"


def test_fail_count_field_is_unhealthy() -> None:
    with start_health_service("fail_count") as ep:
        c = external_check(ep)
    assert c.status == "fail"
    assert "2 failed check" in c.detail
    assert c.data["fail_count"] == 2


def test_fail_count_in_json_output_is_unhealthy() -> None:
    with start_health_service("output_fail_count") as ep:
        c = external_check(ep)
    assert c.status == "fail"
    assert c.data["effective_fail_count"] == 3


@pytest.mark.parametrize("mode", ["garbage", "non_object"])
def test_unusable_output_fails_open(mode: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING), start_health_service(mode) as ep:
        report = preflight(gpu=False, endpoint=ep)
    assert report.healthy is True
    (c,) = report.checks
    assert c.status == "ok"
    assert "ignored" in c.detail
    assert "output_text" in c.data
    assert any("ignored" in r.getMessage() for r in caplog.records)


def test_unreachable_service_fails_open(caplog: pytest.LogCaptureFixture) -> None:
    missing = os.path.join(tempfile.mkdtemp(prefix="rlh-"), "absent.sock")
    with caplog.at_level(logging.WARNING):
        report = preflight(gpu=False, endpoint=f"unix://{missing}", endpoint_timeout_s=2)
    assert report.healthy is True
    (c,) = report.checks
    assert c.status == "error"
    assert "unreachable" in c.detail and "failing open" in c.detail
    assert c.data["grpc_code"] == "UNAVAILABLE"
    assert any("unreachable" in r.getMessage() for r in caplog.records)
    assert report.reason.startswith("no check failed; failing open after errors: external_service")


def test_slow_service_times_out_and_fails_open() -> None:
    with start_health_service("slow") as ep:
        t0 = time.monotonic()
        c = ExternalHealthClient(ep, timeout_s=0.5).check()
        elapsed = time.monotonic() - t0
    assert c.status == "error"
    assert c.data["grpc_code"] == "DEADLINE_EXCEEDED"
    assert "did not answer within 0.5s" in c.detail
    assert elapsed < 10  # bounded by the deadline, not by the server's 30 s sleep


@pytest.mark.parametrize(
    "endpoint, message",
    [
        ("", "empty"),
        ("unix://relative.sock", "absolute path"),
        ("unix:", "no socket path"),
        ("http://host:80", "unsupported scheme"),
        ("just-a-name", "expected unix:///path"),
        ("host:port", "expected unix:///path"),
    ],
)
def test_bad_endpoints_get_a_clear_error(endpoint: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        normalize_endpoint(endpoint)
    # In the preflight itself a bad endpoint fails open, recorded with the same message.
    report = preflight(gpu=False, endpoint=endpoint)
    assert report.healthy is True
    (c,) = report.checks
    assert c.status == "error" and message in c.detail
    assert message in report.reason


def test_good_endpoint_forms() -> None:
    for ep in ("unix:///run/nvhcd.sock", "unix:rel.sock", "127.0.0.1:5051", "dns:///localhost:1"):
        assert normalize_endpoint(ep) == ep
    with pytest.raises(ValueError, match="timeout"):
        ExternalHealthClient("unix:///x.sock", timeout_s=0)


def test_interpret_response_rules() -> None:
    assert interpret_response(True, 0, "").status == "ok"
    assert interpret_response(True, 0, '{"fail_count": 0}').status == "ok"
    assert interpret_response(True, 0, '{"fail_count": true}').status == "ok"  # not a number
    assert interpret_response(True, 0, '{"fail_count": 2.0}').status == "fail"
    assert interpret_response(False, 0, "garbage").status == "fail"  # explicit failure wins
    fail = interpret_response(False, 0, '{"reason": "disk full"}')
    assert "disk full" in fail.detail
