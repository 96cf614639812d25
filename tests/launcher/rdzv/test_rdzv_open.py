"""A failure local to one launcher keeps the shared rendezvous open (NVRx #421): only a
job-wide outcome (success, restart budget spent, STOP acted on) closes it.

Two launchers, `--nnodes 1:2`: n0 (infra rank 0) is active, n1 (the store host) is a
standby. n0's launcher fails on its own (its workers' spool folder cannot be created: a
file stands where it goes, so an exception leaves the launcher). Before #421 that exit
closed the rendezvous and n1 ended too; now n1 takes over and the job succeeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._rdzv_helpers import free_port, start_node, stop_all, wait_listening

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_local_launcher_failure_does_not_close_the_rendezvous(tmp_path: Path) -> None:
    port = free_port()
    broken = tmp_path / "broken-logs"
    (broken / "rz").mkdir(parents=True)
    (broken / "rz" / ".spool").write_text("not a folder")  # n0 cannot spool its workers' output
    nodes = []
    try:
        n1 = start_node(tmp_path, "n1", port, "1:2", group_rank=1)
        nodes.append(n1)
        wait_listening(port, n1.proc)
        nodes.append(start_node(tmp_path, "n0", port, "1:2", group_rank=0, log_dir=broken))
        codes = {n.name: n.wait() for n in nodes}
    finally:
        stop_all(nodes)
    out = {n.name: n.text() for n in nodes}
    assert codes["n0"] not in (0, 2, 3, 4), out  # a launcher error, not a job outcome
    assert "rendezvous round 0: active, group rank 0 of 1 (1 standby)" in out["n0"]
    assert "Traceback" in out["n0"] and ".spool" in out["n0"], out["n0"]
    assert codes["n1"] == 0, out
    assert "rendezvous round 0: standby (hot spare), reserved rank 1" in out["n1"]
    assert "rendezvous round 1: active, group rank 0 of 1 (0 standby)" in out["n1"]
    assert "closed by another node" not in out["n1"]
    log = (tmp_path / "logs" / "rz" / "cycle_0.node0.log").read_text()
    assert "node n1 runs rank 0 of 1 in cycle 0" in log
