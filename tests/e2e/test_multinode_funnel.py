"""`--ft-log-funnel auto` (issue 23): no hand-started writer. Two `relaunch run` launchers on
loopback with separate log folders (no shared file system between the "nodes"): group rank
0's launcher starts the writer and publishes its address in the rendezvous store; node 1
streams its cycle log to it, so both node logs end up in node 0's log folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._launcher_helpers import engine_available
from tests._rdzv_helpers import free_port, start_nodes, stop_all

HELLO = """
import os
print(f"hello from rank {os.environ['RANK']}", flush=True)
"""


def test_auto_funnel_writer_started_by_group_rank_0(tmp_path: Path) -> None:
    if why := engine_available():
        pytest.skip(why)
    script = tmp_path / "hello.py"
    script.write_text(HELLO)
    port = free_port()
    nodes: list = []
    try:
        start_nodes(
            nodes, tmp_path, port, "2", 2, worker=script, job="fun",
            log_dir=lambda i: tmp_path / f"logs{i}",
            extra=("--ft-log-funnel", "auto", "--max-restarts", "0"),
        )  # fmt: skip
        codes = [n.wait(timeout=240) for n in nodes]
    finally:
        stop_all(nodes)
    texts = [n.text() for n in nodes]
    assert codes == [0, 0], "\n-----\n".join(texts)
    assert "log funnel writer (auto) at 127.0.0.1:" in texts[0]
    node0 = tmp_path / "logs0" / "fun"
    streamed = (node0 / "cycle_0.node1.log").read_text()
    assert "[rank1]: hello from rank 1" in streamed
    assert "[rank0]: hello from rank 0" in (node0 / "cycle_0.node0.log").read_text()
    assert not (tmp_path / "logs1" / "fun" / "cycle_0.node1.log").exists()
    assert "warning" not in texts[1], texts[1]
