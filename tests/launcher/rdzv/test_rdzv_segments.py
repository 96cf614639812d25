"""Segment-aware hot spares through real processes: four launchers on loopback with
`--nnodes 2:4 --ft-segment 2`, two NVLink segments given by `RELAUNCH_SEGMENT_ID` (this
machine has no GPU fabric). The first segment is active; a node of it fails (worker, then
health check): the whole other segment becomes active, and the surviving node of the
failed segment becomes a standby. Timing-free as in test_rdzv_spares."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests._rdzv_helpers import free_port, start_nodes, stop_all

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def test_a_segment_with_a_failed_node_is_replaced_whole(tmp_path: Path) -> None:
    from tests._health_helpers import start_health_service

    port = free_port()
    nodes = []
    seg = ("--ft-segment", "2")

    def env(i: int) -> dict[str, str]:
        return {"FAIL_NODE": "n1", "RELAUNCH_SEGMENT_ID": "A" if i < 2 else "B"}

    try:
        with start_health_service("fail_after_first") as endpoint:
            health = ("--ft-node-health-check-endpoint", endpoint, "--ft-node-health-check-interval", "0")  # fmt: skip
            start_nodes(
                nodes, tmp_path, port, "2:4", 4, env=env,
                extra=lambda i: (*seg, *health) if i == 1 else seg,
            )  # fmt: skip
            codes = [n.wait() for n in nodes]
    finally:
        stop_all(nodes)
    out = {n.name: n.text() for n in nodes}
    assert codes == [0, 4, 0, 0], out
    assert "rendezvous round 0: active, group rank 0 of 2 (2 standby)" in out["n0"]
    assert "rendezvous round 0: active, group rank 1 of 2 (2 standby)" in out["n1"]
    assert "rendezvous round 0: standby (hot spare), reserved rank 2" in out["n2"]
    assert "rendezvous round 0: standby (hot spare), reserved rank 3" in out["n3"]
    # segment A lost n1: segment B (n2, n3) takes over whole, with contiguous ranks
    assert "rendezvous round 1: active, group rank 0 of 2 (1 standby)" in out["n2"]
    assert "rendezvous round 1: active, group rank 1 of 2 (1 standby)" in out["n3"]
    assert "rendezvous round 1: standby (hot spare), reserved rank 2" in out["n0"]
    assert "standby: the job succeeded without needing this node" in out["n0"]
    ran = {}
    for log in sorted((tmp_path / "logs" / "rz").glob("cycle_*.log")):
        for m in re.finditer(r"node (n\d) runs rank (\d) of (\d) in cycle (\d)", log.read_text()):
            ran[(int(m.group(4)), int(m.group(2)))] = m.group(1)
    assert ran == {(0, 0): "n0", (0, 1): "n1", (1, 0): "n2", (1, 1): "n3"}, ran
