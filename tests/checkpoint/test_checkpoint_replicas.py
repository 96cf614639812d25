"""Replicas with K = 2 through a real 3-launcher `relaunch run` job (gloo on loopback).

tests/workers/ckpt_replicas.py: step 1 is saved with `replicas=2` and no drain; then two
of the three nodes lose their local tier and the job restarts. Only K >= 2 keeps every
shard: node 0 holds its own and both peers' replicas, so all three nodes restore step 1
from the local tier (nodes 1 and 2 receiving every file from node 0), with the persistent
tier empty. With K = 1, node 1's shard lived only on node 2 and the restore would find
nothing.
"""

from __future__ import annotations

import re

import pytest

from relaunch.checkpoint import latest_complete
from tests._launcher_helpers import REPO, run_two_nodes

WORKER = REPO / "tests" / "workers" / "ckpt_replicas.py"


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_two_nodes_lost_their_local_tier_and_restore_from_the_third(tmp_path) -> None:
    root = tmp_path / "root"
    codes, errs = run_two_nodes(
        tmp_path,
        "ckptk2",
        ["--max-restarts", "1", "--workers-stop-timeout", "3", str(WORKER), "--root", str(root)],
        timeout=300,
        nodes=3,
    )
    assert codes == [0, 0, 0], errs
    logs = tmp_path / "logs" / "ckptk2"
    assert latest_complete(root / "persistent") is None  # no drain: only the local tiers
    for node in range(3):
        text = (logs / f"cycle_0.node{node}.log").read_text()
        assert f"node {node} rank {node}: step 1 committed" in text, text[-2000:]
    restored = {}
    for node in range(3):
        text = (logs / f"cycle_1.node{node}.log").read_text()
        m = re.search(
            rf"node {node} rank (\d+): restored step 1 from local tier content_ok=True "
            r"from_peers=\[(.*)\]",
            text,
        )
        assert m, text[-2000:]
        restored[node] = m.group(2)
    assert restored[0] == ""  # node 0 had everything: its own shard and two replicas
    every = ".metadata<-rank 0,__0_0.distcp<-rank 0,__1_0.distcp<-rank 0,__2_0.distcp<-rank 0"
    assert restored[1] == restored[2] == every
