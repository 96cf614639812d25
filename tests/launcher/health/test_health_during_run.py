"""Node health while the workers run, through real `relaunch run` processes: a NIC of a
fake sysfs tree goes down after the workers said they run, the storage directory becomes a FIFO, and
a healthy run is left alone. Plus the usage errors of the new options."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relaunch.launcher.health.exclusion_file import read_exclusions
from tests._launcher_helpers import REPO, job_args, read_log, relaunch_env, run_relaunch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

WORKER = REPO / "tests" / "workers" / "health_job.py"
WAIT_S = 120.0  # a fail-safe bound on waiting for a condition, never an expected duration


def _fake_sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    d = root / "class" / "net" / "eth9"
    d.mkdir(parents=True)
    (d / "operstate").write_text("up\n")
    (d / "carrier").write_text("1\n")
    return root


def _start(tmp_path: Path, job: str, sysfs: Path, *extra: str) -> subprocess.Popen[str]:
    ctl = tmp_path / "ctl"
    ctl.mkdir(exist_ok=True)
    env = relaunch_env(tmp_path)
    env["RELAUNCH_SYSFS_ROOT"] = str(sysfs)
    args = job_args(
        tmp_path, job, "--ft-attribution-endpoint", "off",
        "--ft-node-health-check-interval", "0.1", *extra,
    ) + [str(WORKER), "--dir", str(ctl)]  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "relaunch.cli", "run", *args],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _wait_for(cond, proc: subprocess.Popen[str]) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + WAIT_S
    while not cond():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"relaunch ended early ({proc.returncode}): {err}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("condition not reached: " + proc.communicate()[1])
        time.sleep(0.05)


def test_nic_down_mid_run_stops_the_workers_and_records_the_node(tmp_path: Path) -> None:
    sysfs = _fake_sysfs(tmp_path)
    excl = tmp_path / "excl.json"
    proc = _start(
        tmp_path, "nic", sysfs, "--ft-enable-nic-healthcheck", "--ft-exclusion-file", str(excl)
    )
    ctl = tmp_path / "ctl"
    _wait_for(lambda: (ctl / "running.0").exists() and (ctl / "running.1").exists(), proc)
    (sysfs / "class/net/eth9/operstate").write_text("down\n")
    _, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 4, err
    assert not (ctl / "release").exists()  # the workers were stopped, not released
    reason = "nic_link: link down: eth9 (operstate 'down')"
    assert f"cycle 0: node unhealthy during the run: {reason}; stopping the workers" in err
    assert f"node unhealthy, not joining the rendezvous: {reason}" in err
    log = read_log(tmp_path, "nic", 0)
    assert "[relaunch] node health during the run: first round: all available" in log
    assert f"[relaunch] node unhealthy during the run: {reason}" in log
    assert '"fact":"cycle_end","cycle":0,"outcome":"failed"' in log
    assert '"fact":"node_health","cycle":0' in log  # the verdict of cycle 0 records it
    host = socket.gethostname()
    record = json.loads((tmp_path / "logs/nic/node_health" / f"{host}.cycle_1.json").read_text())
    assert record["healthy"] is False and record["reason"] == reason
    assert record["excluded_from_cycle"] == 1 and record["ran_this_cycle"] is True
    assert read_exclusions(excl).find(host)["reason"] == reason
    # the workers are gone: their pids no longer exist
    for rank in (0, 1):
        pid = int((ctl / f"running.{rank}").read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_storage_replaced_by_a_fifo_mid_run_makes_the_node_unhealthy(tmp_path: Path) -> None:
    """A directory that stops being one while the workers run (a FIFO given from the start
    is a usage error: tests/launcher/health/test_health_bad_inputs_fail_open.py)."""
    real = tmp_path / "real"
    real.mkdir()
    os.mkfifo(tmp_path / "fifo")
    store = tmp_path / "store"  # a symlink, so that it can be swapped in one rename
    store.symlink_to(real)
    proc = _start(tmp_path, "sto", _fake_sysfs(tmp_path), "--ft-storage-healthcheck-path",
                  str(store))  # fmt: skip
    ctl = tmp_path / "ctl"
    _wait_for(lambda: (ctl / "running.0").exists() and (ctl / "running.1").exists(), proc)
    swap = tmp_path / "swap"
    swap.symlink_to(tmp_path / "fifo")
    os.replace(swap, store)  # atomic: each probe sees the directory or the FIFO
    _, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 4, err
    assert f"node unhealthy during the run: storage: {store}: NotADirectoryError" in err


def test_healthy_run_is_unaffected(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    sysfs = _fake_sysfs(tmp_path)
    proc = _start(tmp_path, "ok", sysfs, "--ft-enable-nic-healthcheck",
                  "--ft-storage-healthcheck-path", str(store))  # fmt: skip
    log = tmp_path / "logs" / "ok" / "cycle_0.log"
    _wait_for(
        lambda: log.exists() and "node health during the run: first round" in log.read_text(),
        proc,
    )
    (tmp_path / "ctl" / "release").write_text("")
    _, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0, err
    assert "node health during the run: every 0.1 s: NIC links: eth9; storage:" in err
    text = log.read_text()
    assert "first round: all available health checks passed (nic_link ok, storage ok)" in text
    assert "unhealthy" not in text and "unhealthy" not in err
    assert list(store.iterdir()) == []  # the probe cleans up


def test_gpu_checks_skip_cleanly_without_nvml(tmp_path: Path) -> None:
    """On a machine without the NVIDIA driver the run-time GPU check says it is skipped."""
    from relaunch.launcher.health.nvml import nvml_probe

    probe = nvml_probe()
    if probe.status == "ok":
        pytest.skip("NVML works here: the GPU check runs (checked on the device machine)")
    args = job_args(tmp_path, "gpu", "--ft-attribution-endpoint", "off",
                    "--ft-node-health-check-interval", "5")  # fmt: skip
    args[args.index("--ft-gpu-health") + 1] = "auto"
    r = run_relaunch(tmp_path, args + [str(WORKER)])
    assert r.returncode == 0, r.stderr
    # no check applies: no thread, no console line; the reason is in the first cycle log
    assert "node health" not in r.stderr
    log = read_log(tmp_path, "gpu", 0)
    assert "node health during the run: not started: GPU checks skipped: NVML not available" in (
        log
    )


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--ft-node-health-check-groups", "a,,b"], "--ft-node-health-check-groups: expected"),
        (["--ft-nic-interfaces", "nosuchnic9"], "--ft-nic-interfaces: NIC 'nosuchnic9' not found"),
        (["--ft-storage-healthcheck-timeout", "0"], "must be > 0 seconds"),
        (["--ft-node-health-check-interval", "-1"], "must be >= 0"),
        (["--ft-node-id", "a/b"], "--ft-node-id 'a/b': must be a non-blank name"),
        (["--numa-binding", "rack"], "invalid choice: 'rack'"),
    ],
)
def test_bad_values_are_usage_errors(tmp_path: Path, flags: list[str], message: str) -> None:
    r = run_relaunch(tmp_path, [*flags, str(WORKER)], timeout=60)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr


DIST_WORKER = """
import os, sys, time
from pathlib import Path
import torch, torch.distributed as dist
from relaunch.launcher.client import heartbeat
ctl = Path(sys.argv[1])
heartbeat()
world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
if world == 1 and not (ctl / "flipped").exists():
    while True:  # alone before the other node arrived: elastic restarts us when it joins
        time.sleep(0.2)
        heartbeat()
dist.init_process_group("gloo")
(ctl / f"running.{rank}.w{world}").write_text(str(os.getpid()))
flag = torch.zeros(1)
while flag.item() == 0:  # until the test writes `release` (all ranks agree)
    heartbeat()
    flag = torch.tensor([1.0 if (ctl / "release").exists() else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    time.sleep(0.05)
dist.destroy_process_group()
"""


def test_two_nodes_the_one_whose_nic_fails_leaves_and_the_other_goes_on(tmp_path: Path) -> None:
    """--nnodes 1:2, two launchers each with its own fake sysfs tree. Once both nodes' ranks
    run, node B's NIC goes down: B stops its workers and exits 4 with its record; A's
    worker loses its peer, A restarts and runs the next cycle alone, then succeeds."""
    script, ctl = tmp_path / "dist.py", tmp_path / "ctl"
    script.write_text(DIST_WORKER)
    ctl.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def launcher(name: str, *extra: str) -> subprocess.Popen[str]:
        sysfs = _fake_sysfs(tmp_path / name)
        env = relaunch_env(tmp_path)
        env["RELAUNCH_SYSFS_ROOT"] = str(sysfs)
        cmd = [
            sys.executable, "-m", "relaunch.cli", "run",
            "--nnodes", "1:2", "--nproc-per-node", "1",
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "two",
            # torch's dynamic rendezvous: both nodes active (scale-up); with the default
            # barrier rendezvous --nnodes 1:2 makes the second node a hot spare
            "--ft-rdzv-impl", "c10d",
            "--rdzv-conf", "last_call_timeout=2",
            "--log-dir", str(tmp_path / "logs"), "--job-id", "two",
            "--ft-attribution-endpoint", "off", "--ft-gpu-health", "off",
            "--workers-stop-timeout", "3", "--ft-node-id", name,
            "--ft-node-health-check-interval", "0.1", "--ft-enable-nic-healthcheck",
            *extra, str(script), str(ctl),
        ]  # fmt: skip
        return subprocess.Popen(
            cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip

    a = launcher("node-a")  # hosts the c10d store: the node that stays must be the host

    def store_up() -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    _wait_for(store_up, a)
    b = launcher("node-b")
    try:
        both = [ctl / "running.0.w2", ctl / "running.1.w2"]
        _wait_for(lambda: all(p.exists() for p in both), a)
        (ctl / "flipped").write_text("")
        (tmp_path / "node-b/sys/class/net/eth9/operstate").write_text("down\n")
        _, err_b = b.communicate(timeout=WAIT_S)
        assert b.returncode == 4, err_b
        assert "node unhealthy during the run: nic_link: link down: eth9" in err_b
        _wait_for(lambda: (ctl / "running.0.w1").exists(), a)
        (ctl / "release").write_text("")
        _, err_a = a.communicate(timeout=WAIT_S)
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert a.returncode == 0, err_a
    assert "node unhealthy" not in err_a and "exclusion" not in err_a
    logs = sorted(p.name for p in (tmp_path / "logs" / "two").glob("cycle_*.log"))
    last = (tmp_path / "logs" / "two" / logs[-1]).read_text()
    assert "world_size=1" in last and '"outcome":"succeeded"' in last
    records = list((tmp_path / "logs" / "two" / "node_health").glob("*.json"))
    assert len(records) == 1
    record = json.loads(records[0].read_text())
    assert record["host"] == "node-b" and record["healthy"] is False


def test_health_service_failing_during_the_run(tmp_path: Path) -> None:
    """A real nvhcd service answers healthy to the preflight, then failing: the run-time
    round asks it again (with the check groups) and the node leaves."""
    from tests._health_helpers import start_health_service

    with start_health_service("fail_after_first") as endpoint:
        proc = _start(
            tmp_path, "svc", _fake_sysfs(tmp_path), "--ft-node-health-check-endpoint", endpoint,
            "--ft-node-health-check-groups", "prolog,gpu",
        )  # fmt: skip
        _, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 4, err
    assert f"health service {endpoint} (groups prolog,gpu)" in err
    assert (
        "node unhealthy during the run: external_service: health service reported failure: "
        "ib check failed"
    ) in err
