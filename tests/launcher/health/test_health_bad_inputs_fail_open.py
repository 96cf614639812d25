"""Hostile inputs to the run-time health, exclusion-file and calculated-timeout features,
and the default of `--ft-node-health-check-interval`, through real files, a real fake
sysfs tree and real `relaunch run` processes.

Each bad option value is a one-line usage error (exit 2, no traceback); each bad shared
file (a FIFO that would block a plain open, `/dev/zero`, an oversized or too deeply nested
document, a tampered value) fails open with a warning and never hangs the launcher.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from relaunch.launcher.config import RunSettings, resolve
from relaunch.launcher.health.exclusion_file import (
    ExclusionFileError,
    append_exclusion,
    read_exclusions,
)
from relaunch.launcher.health.runtime import RuntimeHealth
from relaunch.launcher.health.storage import StorageCheck
from relaunch.launcher.timeouts_auto import AutoTimeouts, state_name
from tests._launcher_helpers import REPO, job_args, relaunch_env, run_relaunch

WORKER = REPO / "tests" / "workers" / "health_job.py"


# -- option values: one line, exit 2 ------------------------------------------------------
def _fake_sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    d = root / "class" / "net" / "eth9"
    d.mkdir(parents=True, exist_ok=True)
    (d / "operstate").write_text("up\n")
    (d / "carrier").write_text("1\n")
    (root / "class" / "infiniband" / "mlx5_0" / "ports" / "1").mkdir(parents=True, exist_ok=True)
    return root


def _run_env(tmp_path: Path, args: list[str], timeout: float = 60):  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    env = relaunch_env(tmp_path)
    env["RELAUNCH_SYSFS_ROOT"] = str(_fake_sysfs(tmp_path))
    return subprocess.run(
        [sys.executable, "-m", "relaunch.cli", "run", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


@pytest.mark.parametrize(
    "flags, message",
    [
        # nan compares false with everything: it switched the monitor (or a timeout) off
        (["--ft-node-health-check-interval", "nan"], "must be a finite number of seconds"),
        (["--ft-node-health-check-interval", "inf"], "must be a finite number of seconds"),
        # Event.wait(1e300) overflows: the monitor thread died after its first round
        (["--ft-node-health-check-interval", "1e300"], "at most 1e+07"),
        (["--ft-heartbeat-timeout", "nan"], "--ft-heartbeat-timeout: 'nan': must be a finite"),
        (["--ft-storage-healthcheck-timeout", "nan"], "must be a finite number"),
        # a path escaping class/net was accepted and then read as a link that is down
        (["--ft-nic-interfaces", "../"], "NIC '../' is not an interface or HCA name"),
        (["--ft-nic-interfaces", "eth9/../eth9"], "is not an interface or HCA name"),
        # a mistyped IB port was accepted, then failed the node at the first round (exit 4)
        (["--ft-nic-interfaces", "mlx9:1"], "NIC 'mlx9:1': no port 1 under"),
        (["--ft-nic-interfaces", "mlx5_0:x"], "the port after ':' must be a number"),
        (["--ft-safety-factor", "nan"], "--ft-safety-factor: 'nan': must be between 1 and 1000"),
        (["--ft-min-progress-iterations", "-1"], "must be >= 1"),
        # the node id names files and console lines: a newline was accepted
        (["--ft-node-id", "a\nb"], "--ft-node-id 'a\\nb': must be a non-blank name"),
        (["--ft-node-id", "a b"], "--ft-node-id 'a b': must be a non-blank name"),
    ],
)
def test_bad_option_values_are_one_line_usage_errors(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    r = _run_env(tmp_path, [*job_args(tmp_path, "bad"), *flags, str(WORKER)])
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "logs" / "bad").exists()  # nothing started


def test_a_good_ib_port_is_accepted(tmp_path: Path) -> None:
    """The control of the case above: the port that exists passes the startup check."""
    r = _run_env(
        tmp_path, [*job_args(tmp_path, "ib"), "--ft-attribution-endpoint", "off",
                   "--ft-nic-interfaces", "mlx5_0:1", str(WORKER)]
    )  # fmt: skip
    assert "--ft-nic-interfaces" not in r.stderr, r.stderr


def test_storage_path_that_is_not_storage_is_a_usage_error(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc_link = tmp_path / "procl"
    proc_link.symlink_to("/proc")
    for path, message in [
        (fifo, f"--ft-storage-healthcheck-path {fifo}: not a directory"),
        (proc_link, "resolves to /proc, a kernel pseudo filesystem, not storage"),
    ]:
        r = run_relaunch(
            tmp_path, [*job_args(tmp_path, "sto"), "--ft-storage-healthcheck-path", str(path),
                       str(WORKER)], timeout=60,
        )  # fmt: skip
        assert r.returncode == 2, r.stderr
        assert message in r.stderr and "Traceback" not in r.stderr


# -- the storage probe in a shared directory ------------------------------------------------
def test_storage_probe_never_follows_a_planted_symlink(tmp_path: Path) -> None:
    """Another user of a shared directory plants a symlink at the probe's (predictable)
    name: the probe used to open it with O_TRUNC and write through it."""
    store = tmp_path / "store"
    store.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    check = StorageCheck(store, timeout_s=60, name="probe")
    (store / "probe").symlink_to(victim)
    [result] = check()
    assert victim.read_text() == "precious\n"
    assert result.status == "ok", result.detail  # the planted entry was removed, not used
    assert list(store.iterdir()) == []


# -- the exclusion file: fail open, never hang -------------------------------------------
@pytest.mark.timeout(60)
def test_exclusion_file_that_is_a_fifo_is_unusable_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "excl.json"
    os.mkfifo(fifo)
    with pytest.raises(ExclusionFileError, match="not a regular file"):
        read_exclusions(fifo)
    with pytest.raises(ExclusionFileError):  # not overwritten: someone put it there
        append_exclusion(fifo, "n1", "why")
    assert fifo.is_fifo()


@pytest.mark.timeout(60)
def test_exclusion_file_hostile_contents_fail_open(tmp_path: Path) -> None:
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"excluded": ["x" * 100]}) + " " * (5 << 20))  # over the 4 MiB bound
    with pytest.raises(ExclusionFileError, match="not a regular file"):
        read_exclusions(zero)
    with pytest.raises(ExclusionFileError, match="nested too deeply"):
        read_exclusions(deep)  # was a RecursionError: a traceback before any rendezvous
    with pytest.raises(ExclusionFileError, match="larger than"):
        read_exclusions(big)
    ok = tmp_path / "ok.json"
    ok.symlink_to(tmp_path / "target.json")  # a symlink to a regular file is followed
    (tmp_path / "target.json").write_text(json.dumps(["gpu-1"]))
    assert read_exclusions(ok).find("gpu-1") == {"node": "gpu-1"}


def test_exclusion_file_in_a_directory_that_cannot_be_written_warns(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    settings = resolve(
        {"script": "x.py", "ft_exclusion_file": str(tmp_path / "afile" / "excl.json"),
         "ft_node_id": "n7", "ft_gpu_health": "off", "ft_node_health_check_interval": 0.0}
    )  # fmt: skip
    said: list[str] = []
    health = RuntimeHealth(settings, said.append, said.append)
    assert health.excluded() is None  # missing: fail open
    from relaunch.launcher.health.report import CheckResult, HealthReport

    health.publish(HealthReport.from_checks([CheckResult("nic_link", "fail", "down")], node="n7"))
    assert any(
        "warning: node n7 not added to exclusion file" in line and "Not a directory" in line
        for line in said
    ), said


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_launcher_with_a_fifo_exclusion_file_warns_and_runs(tmp_path: Path) -> None:
    """End to end: the launcher used to block forever opening the FIFO."""
    fifo = tmp_path / "excl.json"
    os.mkfifo(fifo)
    r = run_relaunch(
        tmp_path, [*job_args(tmp_path, "fifo"), "--ft-attribution-endpoint", "off",
                   "--ft-exclusion-file", str(fifo), str(WORKER)], timeout=150,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (
        f"relaunch: warning: exclusion file {fifo} unusable (cannot read: {fifo} is not a "
        "regular file); failing open (joining)"
    ) in r.stderr


# -- calculated timeouts: a tampered state file -------------------------------------------
def _state(tmp_path: Path, observed: dict) -> Path:  # type: ignore[type-arg]
    path = tmp_path / state_name(None)
    path.write_text(json.dumps({"version": 1, "observed": observed}))
    return path


@pytest.mark.parametrize("value", [1e308, 1e9, -5.0])
def test_tampered_intervals_do_not_stretch_a_timeout(tmp_path: Path, value: float) -> None:
    _state(tmp_path, {"heartbeat": [value, 10], "initial": [2.0, 1],
                      "sections": {"step": [value, 3]}})  # fmt: skip
    said: list[str] = []
    auto = AutoTimeouts(tmp_path, 5.0, said.append)
    auto.recorder(None)
    assert auto.current is not None and auto.current.initial == 10.0  # the sane value
    assert auto.current.heartbeat is None and auto.current.sections == {}, auto.current


def test_nan_in_the_state_file_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / state_name(None)
    path.write_text('{"version": 1, "observed": {"heartbeat": [NaN, 5], "initial": [Infinity, 1]}}')
    auto = AutoTimeouts(tmp_path, 5.0, lambda _: None)
    auto.recorder(None)
    assert auto.current is None


@pytest.mark.timeout(60)
def test_state_file_that_is_a_fifo_or_deep_is_a_warning(tmp_path: Path) -> None:
    fifo_dir = tmp_path / "a"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / state_name(None))
    deep_dir = tmp_path / "b"
    deep_dir.mkdir()
    (deep_dir / state_name(None)).write_text("[" * 100_000 + "]" * 100_000)
    for job_dir in (fifo_dir, deep_dir):
        said: list[str] = []
        auto = AutoTimeouts(job_dir, 5.0, said.append)
        auto.recorder(None)
        assert auto.current is None
        assert len(said) == 1 and "not read" in said[0] and "starting afresh" in said[0], said


# -- the default interval ---------------------------------------------------------------
def test_default_interval_is_nvrx_five_seconds() -> None:
    assert RunSettings().ft_node_health_check_interval == 5.0
    assert resolve({"script": "x.py"}).ft_node_health_check_interval == 5.0


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_default_interval_watches_a_configured_check_with_one_line(tmp_path: Path) -> None:
    """No interval flag: a NIC check runs while the workers run (one start line); without
    any check that applies, nothing on the console and the reason in the cycle log."""
    r = _run_env(
        tmp_path, [*job_args(tmp_path, "nic"), "--ft-attribution-endpoint", "off",
                   "--ft-enable-nic-healthcheck", str(WORKER)], timeout=150,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "node health" in ln]
    assert lines == ["relaunch: node health during the run: every 5 s: NIC links: eth9"], lines
    log = (tmp_path / "logs" / "nic" / "cycle_0.log").read_text()
    assert "node health during the run: first round: all available" in log

    r = _run_env(
        tmp_path, [*job_args(tmp_path, "none"), "--ft-attribution-endpoint", "off",
                   str(WORKER)], timeout=150,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "node health" not in r.stderr
    log = (tmp_path / "logs" / "none" / "cycle_0.log").read_text()
    assert "[relaunch] node health during the run: not started: no check configured" in log
    assert "first round" not in log


def test_storage_probe_never_writes_through_a_planted_hard_link(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    victim = store / "victim.txt"  # same filesystem: a hard link is possible
    victim.write_text("precious\n")
    os.link(victim, store / "probe")
    [result] = StorageCheck(store, timeout_s=60, name="probe")()
    assert result.status == "ok", result.detail
    assert victim.read_text() == "precious\n"
    assert sorted(p.name for p in store.iterdir()) == ["victim.txt"]


def test_exclusion_append_gives_up_on_a_lock_that_stays_held(tmp_path: Path) -> None:
    """A writer stuck while holding the lock (a hung shared mount) used to block the failing
    node's exit forever; the append now gives up and the launcher only warns."""
    import fcntl

    path = tmp_path / "excl.json"
    with open(tmp_path / "excl.json.lock", "a+b") as held:  # another open file: a rival
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        with pytest.raises(ExclusionFileError, match="held by another process for more than"):
            append_exclusion(path, "n1", "nic down", lock_timeout_s=0.2)
    assert not path.exists()
    assert append_exclusion(path, "n1", "nic down", lock_timeout_s=0.2) is True  # released


def test_numa_topology_with_a_bogus_cpulist_is_a_usage_error(tmp_path: Path) -> None:
    """A cpulist of `0-99999999999` used to build a set of 10^11 CPUs (memory exhausted);
    text that is no CPU list escaped as a bare int() error."""
    from relaunch.launcher.numa import NumaError, numa_nodes
    from relaunch.launcher.sysfs import parse_cpulist

    with pytest.raises(ValueError, match="bad CPU range"):
        parse_cpulist("0-70000")  # just past the bound: cheap even where unbounded
    node = tmp_path / "devices" / "system" / "node" / "node0"
    node.mkdir(parents=True)
    for text in ("0-70000", "zero"):
        (node / "cpulist").write_text(text + "\n")
        with pytest.raises(NumaError, match="cpulist"):
            numa_nodes(tmp_path)
    (node / "cpulist").write_text("0-1\n")
    assert numa_nodes(tmp_path) == {0: {0, 1}}
