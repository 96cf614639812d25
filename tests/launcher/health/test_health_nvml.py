"""GPU health: the real pynvml path (not-available here, full checks on a GPU machine) and
the judgement of collected NVML snapshots."""

from __future__ import annotations

import json

import pytest

from relaunch.launcher.health import preflight
from relaunch.launcher.health.nvml import (
    GpuSnapshot,
    NvmlOptions,
    evaluate_snapshots,
    gpu_checks,
    load_xid_table,
    nvml_probe,
)


def _driver_present() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


HAVE_DRIVER = _driver_present()


@pytest.mark.skipif(
    HAVE_DRIVER, reason="NVIDIA driver present: the no-driver path needs a machine without one"
)
def test_no_driver_is_not_available_and_never_fails() -> None:
    probe = nvml_probe()
    assert probe.status == "not_available"
    assert "NVML" in probe.detail
    checks = gpu_checks(NvmlOptions(window_s=0.2, samples=3))
    assert [c.status for c in checks] == ["not_available"]
    report = preflight(gpu=True)
    assert report.healthy is True
    assert report.reason == "no health checks available on this node"
    as_json = json.loads(json.dumps(report.to_dict()))
    assert as_json["healthy"] is True
    assert as_json["checks"][0]["name"] == "nvml"
    assert as_json["checks"][0]["status"] == "not_available"


@pytest.mark.skipif(not HAVE_DRIVER, reason="no NVIDIA driver")
def test_real_gpu_checks() -> None:
    checks = gpu_checks(NvmlOptions(window_s=0.5, samples=3))
    by_name = {c.name: c for c in checks}
    assert by_name["nvml"].status == "ok"
    assert by_name["gpu0.reachable"].status == "ok"
    assert by_name["gpu0.reachable"].data["uuid"].startswith("GPU-")
    assert by_name["gpu0.ecc"].status in ("ok", "fail", "not_available")
    assert by_name["gpu0.xid"].status in ("ok", "fail", "not_available")
    assert by_name["gpu0.nvlink"].status in ("ok", "fail", "not_available")
    json.dumps([c.to_dict() for c in checks])
    report = preflight(gpu=True, nvml_options=NvmlOptions(window_s=0.5, samples=3))
    assert report.healthy == (not any(c.status == "fail" for c in report.checks))


def _good(index: int = 0, links: int = 4) -> GpuSnapshot:
    return GpuSnapshot(
        index=index,
        uuid=f"GPU-{index}",
        name="H100",
        retired_pages_pending=False,
        remapped_rows={"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
        ecc_uncorrected_volatile=0,
        ecc_uncorrected_aggregate=0,
        nvlink_active={i: True for i in range(links)},
        nvlink_samples=[{f"link{i}.replay": 3 for i in range(links)} for _ in range(3)],
        xids=[],
        xid_supported=True,
    )


def _statuses(checks, gpu: str = "gpu0") -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {c.name.removeprefix(f"{gpu}."): c.status for c in checks if c.name.startswith(gpu)}


def test_healthy_snapshot_all_ok() -> None:
    checks = evaluate_snapshots([_good(0), _good(1)])
    assert checks[0].name == "nvml" and checks[0].status == "ok"
    assert not [c for c in checks if c.status != "ok"]
    assert _statuses(checks) == {
        "reachable": "ok",
        "retired_pages": "ok",
        "remapped_rows": "ok",
        "ecc": "ok",
        "xid": "ok",
        "nvlink": "ok",
        "nvlink_errors": "ok",
    }


def test_lost_gpu_fails() -> None:
    lost = GpuSnapshot(index=1, lost=True)
    checks = evaluate_snapshots([_good(0), lost])
    (c,) = [c for c in checks if c.name == "gpu1.reachable"]
    assert c.status == "fail"


@pytest.mark.parametrize(
    "change, check, text",
    [
        ({"retired_pages_pending": True}, "retired_pages", "pending"),
        (
            {
                "remapped_rows": {
                    "correctable": 1,
                    "uncorrectable": 1,
                    "pending": True,
                    "failure": False,
                }
            },
            "remapped_rows",
            "pending",
        ),
        (
            {
                "remapped_rows": {
                    "correctable": 0,
                    "uncorrectable": 9,
                    "pending": False,
                    "failure": True,
                }
            },
            "remapped_rows",
            "failed",
        ),
        ({"ecc_uncorrected_volatile": 2}, "ecc", "2 uncorrectable"),
        ({"xids": [79]}, "xid", "Xid 79"),
        ({"nvlink_active": {0: True, 1: True, 2: False, 3: True}}, "nvlink", "down: [2]"),
        (
            {"nvlink_samples": [{"link0.replay": 0}, {"link0.replay": 4}, {"link0.replay": 9}]},
            "nvlink_errors",
            "link0.replay",
        ),
    ],
)
def test_each_fault_fails_its_check(change: dict, check: str, text: str) -> None:
    snap = _good(0)
    for key, value in change.items():
        setattr(snap, key, value)
    checks = evaluate_snapshots([snap, _good(1)])
    failed = [c for c in checks if c.status == "fail"]
    assert [c.name for c in failed] == [f"gpu0.{check}"]
    assert text in failed[0].detail


def test_transient_nvlink_change_and_workload_xid_pass() -> None:
    snap = _good(0)
    snap.nvlink_samples = [{"link0.crc_flit": 0}, {"link0.crc_flit": 50}, {"link0.crc_flit": 50}]
    snap.xids = [13, 31]  # workload-caused Xids: reported, not failing
    checks = evaluate_snapshots([snap])
    st = _statuses(checks)
    assert st["nvlink_errors"] == "ok"
    assert st["xid"] == "ok"
    xid = next(c for c in checks if c.name == "gpu0.xid")
    assert [e["xid"] for e in xid.data["events"]] == [13, 31]
    assert "2 non-critical" in xid.detail


def test_min_active_nvlinks_option() -> None:
    a, b = _good(0, links=2), _good(1, links=2)
    assert all(c.status == "ok" for c in evaluate_snapshots([a, b]))
    checks = evaluate_snapshots([a, b], NvmlOptions(min_active_nvlinks=4))
    assert {c.name for c in checks if c.status == "fail"} == {"gpu0.nvlink", "gpu1.nvlink"}


def test_nvlink_peer_check_can_be_disabled() -> None:
    degraded = _good(0)
    degraded.nvlink_active = {0: True, 1: False, 2: False, 3: False}
    checks = evaluate_snapshots([degraded, _good(1)], NvmlOptions(nvlink_peer_check=False))
    assert not [c for c in checks if c.status == "fail"]
    nvlink = next(c for c in checks if c.name == "gpu0.nvlink")
    assert nvlink.data["inactive"] == [1, 2, 3]


def test_unsupported_features_are_not_available_never_fail() -> None:
    bare = GpuSnapshot(index=0, uuid="GPU-0", xid_supported=False)
    checks = evaluate_snapshots([bare])
    st = _statuses(checks)
    assert st == {
        "reachable": "ok",
        "memory_repair": "not_available",
        "ecc": "not_available",
        "xid": "not_available",
        "nvlink": "not_available",
    }


def test_read_errors_are_reported_as_error_not_fail() -> None:
    snap = _good(0)
    snap.read_errors = {"ecc.volatile": "NVMLError_Unknown: Unknown Error"}
    checks = evaluate_snapshots([snap])
    err = next(c for c in checks if c.name == "gpu0.nvml_reads")
    assert err.status == "error"
    assert not [c for c in checks if c.status == "fail"]


def test_xid_table_is_data() -> None:
    table = load_xid_table()
    assert table[79]["node_unhealthy"] is True
    assert table[13]["node_unhealthy"] is False
    for code, entry in table.items():
        assert isinstance(code, int) and code > 0
        assert isinstance(entry["name"], str) and entry["name"]
        assert isinstance(entry["node_unhealthy"], bool)
