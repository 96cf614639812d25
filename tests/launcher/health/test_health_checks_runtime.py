"""The run-time node checks on their own: NIC link state from a fake sysfs tree, the
storage probe on real directories / FIFOs, the monitor thread, and the nvhcd check groups
sent to a real gRPC service."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from relaunch.launcher.health.monitor import HealthMonitor, parse_groups
from relaunch.launcher.health.nic import NicCheck, parse_links
from relaunch.launcher.health.report import CheckResult
from relaunch.launcher.health.storage import StorageCheck
from relaunch.launcher.sysfs import format_cpulist, parse_cpulist


def make_net(root: Path, name: str, oper: str, carrier: str | None = "1") -> Path:
    d = root / "class" / "net" / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "operstate").write_text(oper + "\n")
    if carrier is not None:
        (d / "carrier").write_text(carrier + "\n")
    return d


def make_ib(root: Path, dev: str, port: str, state: str) -> Path:
    d = root / "class" / "infiniband" / dev / "ports" / port
    d.mkdir(parents=True, exist_ok=True)
    (d / "state").write_text(state + "\n")
    return d


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    make_net(root, "lo", "unknown", "1")
    make_net(root, "eth0", "up")
    make_net(root, "eth1", "down", None)  # down from the start: not this job's link
    make_ib(root, "mlx5_0", "1", "4: ACTIVE")
    make_ib(root, "mlx5_0", "2", "1: DOWN")
    return root


def test_default_links_are_those_up_at_start(sysfs: Path) -> None:
    nic = NicCheck(root=sysfs)
    assert [link.label for link in nic.links] == ["eth0", "mlx5_0:1"]
    [result] = nic()
    assert result.status == "ok" and result.detail == "2 link(s) up"


def test_interface_going_down_fails(sysfs: Path) -> None:
    nic = NicCheck(root=sysfs)
    (sysfs / "class/net/eth0/operstate").write_text("down\n")
    [result] = nic()
    assert result.status == "fail"
    assert result.detail == "link down: eth0 (operstate 'down')"


def test_lost_carrier_fails(sysfs: Path) -> None:
    nic = NicCheck(["eth0"], root=sysfs)
    (sysfs / "class/net/eth0/carrier").write_text("0\n")
    [result] = nic()
    assert result.status == "fail" and "carrier '0'" in result.detail


def test_ib_port_leaving_active_fails(sysfs: Path) -> None:
    nic = NicCheck(["mlx5_0:1"], root=sysfs)
    assert nic()[0].status == "ok"
    (sysfs / "class/infiniband/mlx5_0/ports/1/state").write_text("2: INIT\n")
    [result] = nic()
    assert result.status == "fail" and result.detail == "link down: mlx5_0:1 (state '2: INIT')"


def test_whole_hca_watches_every_port(sysfs: Path) -> None:
    nic = NicCheck(["mlx5_0"], root=sysfs)
    assert [link.label for link in nic.links] == ["mlx5_0:1", "mlx5_0:2"]
    assert "mlx5_0:2 (state '1: DOWN')" in nic()[0].detail


def test_vanished_interface_fails(sysfs: Path) -> None:
    nic = NicCheck(root=sysfs)
    for f in (sysfs / "class/net/eth0").iterdir():
        f.unlink()
    (sysfs / "class/net/eth0").rmdir()
    assert "eth0 (operstate not readable (interface gone?))" in nic()[0].detail


def test_unknown_interface_is_an_error(sysfs: Path) -> None:
    with pytest.raises(ValueError, match="NIC 'ib7' not found under"):
        parse_links(sysfs, ["ib7"])


def test_nothing_to_watch_is_not_available(tmp_path: Path) -> None:
    [result] = NicCheck(root=tmp_path)()
    assert result.status == "not_available"


def test_sysfs_root_from_the_environment(sysfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAUNCH_SYSFS_ROOT", str(sysfs))
    assert [link.label for link in NicCheck().links] == ["eth0", "mlx5_0:1"]


def test_cpulist_round_trip() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert format_cpulist({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    with pytest.raises(ValueError):
        parse_cpulist("3-1")


# -- storage ------------------------------------------------------------------------------
def test_storage_ok_and_leaves_nothing(tmp_path: Path) -> None:
    [result] = StorageCheck(tmp_path, timeout_s=30)()
    assert result.status == "ok" and result.detail == f"{tmp_path} writable"
    assert list(tmp_path.iterdir()) == []


def test_storage_path_that_is_a_fifo_fails(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    [result] = StorageCheck(fifo, timeout_s=30)()
    assert result.status == "fail" and "NotADirectoryError" in result.detail


def test_storage_missing_dir_fails(tmp_path: Path) -> None:
    [result] = StorageCheck(tmp_path / "gone", timeout_s=30)()
    assert result.status == "fail" and "FileNotFoundError" in result.detail


def test_storage_that_never_answers_fails_within_the_bound(tmp_path: Path) -> None:
    """The probe file is a FIFO without a reader: opening it for writing blocks forever,
    as a write on a hung mount does. The check fails at its bound, and the next call
    reports the stuck probe instead of starting another."""
    os.mkfifo(tmp_path / "probe")
    check = StorageCheck(tmp_path, timeout_s=0.5, name="probe")
    [result] = check()
    assert result.status == "fail"
    assert result.detail == f"{tmp_path}: write+fsync+read did not answer within 0.5 s"
    assert check()[0].detail == f"{tmp_path}: an earlier probe is still stuck"
    fd = os.open(tmp_path / "probe", os.O_RDONLY)  # let the stuck probe finish
    os.close(fd)


def test_storage_bad_timeout() -> None:
    with pytest.raises(ValueError, match="must be > 0"):
        StorageCheck("/tmp", timeout_s=0)


# -- the monitor --------------------------------------------------------------------------
def test_monitor_keeps_the_first_unhealthy_report_and_ends(sysfs: Path) -> None:
    nic = NicCheck(root=sysfs)
    rounds: list[tuple[int, bool]] = []
    first = threading.Event()

    def on_round(n: int, report) -> None:  # type: ignore[no-untyped-def]
        rounds.append((n, report.healthy))
        first.set()

    mon = HealthMonitor([("nic_link", nic)], 0.05, node="n1", on_round=on_round)
    mon.start()
    assert first.wait(60)
    assert mon.unhealthy is None
    (sysfs / "class/net/eth0/operstate").write_text("lowerlayerdown\n")
    mon._thread.join(60)  # type: ignore[union-attr]  # the thread ends on its own
    assert not mon._thread.is_alive()  # type: ignore[union-attr]
    report = mon.unhealthy
    assert report is not None and report.node == "n1"
    assert report.reason == "nic_link: link down: eth0 (operstate 'lowerlayerdown')"
    assert rounds[-1] == (mon.rounds, False) and all(ok for _, ok in rounds[:-1])
    mon.stop()


def test_monitor_fails_open_on_a_crashing_check() -> None:
    def broken() -> list[CheckResult]:
        raise RuntimeError("boom")

    mon = HealthMonitor([("broken", broken)], 1.0)
    report = mon.run_round()
    assert report.healthy
    assert report.checks[0].status == "error" and "boom" in report.checks[0].detail


def test_monitor_stop_is_clean() -> None:
    mon = HealthMonitor([("ok", lambda: [CheckResult("ok", "ok")])], 3600)
    mon.start()
    mon.stop(timeout=60)
    assert not mon._thread.is_alive()  # type: ignore[union-attr]
    assert mon.rounds == 1 and mon.unhealthy is None
    with pytest.raises(ValueError):
        HealthMonitor([], 0)


def test_check_groups() -> None:
    assert parse_groups("prolog,epilog,logs,gpu") == ("prolog", "epilog", "logs", "gpu")
    for bad in ("", "a,,b", " , "):
        with pytest.raises(ValueError, match="comma-separated"):
            parse_groups(bad)


def test_groups_reach_the_health_service() -> None:
    """The service echoes the request's args: the groups are what it receives."""
    from relaunch.launcher.health.external import external_check
    from tests._health_helpers import start_health_service

    with start_health_service("healthy") as ep:
        result = external_check(ep, args=parse_groups("prolog,epilog,logs,gpu"))
    assert result.status == "ok"
    assert result.data["output"]["args"] == ["prolog", "epilog", "logs", "gpu"]
    json.dumps(result.data)


def test_a_round_finishing_after_stop_is_discarded() -> None:
    """The cycle ended while a round ran (stop without waiting): its failure is dropped,
    so a new cycle is never failed by the old cycle's check."""
    entered, release = threading.Event(), threading.Event()

    def slow_failing() -> list[CheckResult]:
        entered.set()
        release.wait(60)
        return [CheckResult("slow", "fail", "late")]

    mon = HealthMonitor([("slow", slow_failing)], 3600)
    mon.start()
    assert entered.wait(60)
    mon.stop(timeout=0)
    release.set()
    mon._thread.join(60)  # type: ignore[union-attr]
    assert mon.rounds == 1 and mon.unhealthy is None


def test_yaml_keys_of_nvrx(tmp_path: Path) -> None:
    from relaunch.launcher.config import resolve

    cfg = tmp_path / "ft.yaml"
    cfg.write_text(
        "fault_tolerance:\n  node_health_check_interval: 7\n  enable_nic_healthcheck: true\n"
        f"  storage_healthcheck_path: {tmp_path}\n  exclusion_file: {tmp_path / 'x.json'}\n"
    )
    s = resolve({"script": "x.py"}, str(cfg))
    assert s.ft_node_health_check_interval == 7.0 and s.ft_enable_nic_healthcheck is True
    assert s.ft_storage_healthcheck_path == str(tmp_path)
    assert s.ft_exclusion_file == str(tmp_path / "x.json")
    assert not any("node_health_check_interval" in w for w in s.warnings)


def _snap(index: int, **counters: int | None):  # type: ignore[no-untyped-def]
    from relaunch.launcher.health.nvml import GpuSnapshot

    return GpuSnapshot(index=index, uuid=f"GPU-{index}", nvlink_samples=[dict(counters)])


def test_nvlink_growth_across_rounds() -> None:
    """A link gaining an error every round fails once enough rounds are seen; a counter
    that moved once and a counter reset do not."""
    from relaunch.launcher.health.nvlink_window import CounterWindow

    window = CounterWindow(4)
    rounds = [
        [_snap(0, **{"link0.replay": 5}), _snap(1, **{"link0.crc_flit": 0})],
        [_snap(0, **{"link0.replay": 6}), _snap(1, **{"link0.crc_flit": 9})],  # once
        [_snap(0, **{"link0.replay": 7}), _snap(1, **{"link0.crc_flit": 9})],
        [_snap(0, **{"link0.replay": 8}), _snap(1, **{"link0.crc_flit": 0})],  # reset
    ]
    results = [window.add(r) for r in rounds]
    assert [[c.status for c in r] for r in results] == [
        ["ok", "ok"],
        ["ok", "ok"],
        ["fail", "ok"],
        ["fail", "ok"],
    ]
    fail = results[2][0]
    assert fail.name == "gpu0.nvlink_errors_rounds"
    assert fail.detail == "NVLink error counters grew over 3 rounds: link0.replay"
    assert results[3][0].data["counters"]["link0.replay"]["total_growth"] == 3
    with pytest.raises(ValueError):
        CounterWindow(2)


def test_gpu_round_check_without_nvml_is_not_available() -> None:
    from relaunch.launcher.health.monitor import gpu_round_check
    from relaunch.launcher.health.nvml import nvml_probe

    if nvml_probe().status == "ok":
        pytest.skip("NVML works here (checked on the device machine)")
    [result] = gpu_round_check(0.1)()
    assert result.name == "nvml" and result.status in ("not_available", "error")
