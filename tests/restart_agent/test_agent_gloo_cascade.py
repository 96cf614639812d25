"""A gloo 'connection closed/reset by peer' error is a follow-on of a peer's death, never the root."""

from __future__ import annotations

from pathlib import Path

from relaunch.restart_agent import analyze_file

LOG = """\
[rank 1]: iteration 5 loss=1.0
[rank 0]: Traceback (most recent call last):
[rank 0]:   File "train.py", line 10, in <module>
[rank 0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:59436
[rank 1]: torch.distributed.DistNetworkError: NCCL error in: ProcessGroupNCCL.cpp:1234, unhandled system error, NCCL version 2.19.3
"""


def test_peer_connection_loss_printed_first_does_not_become_the_primary(tmp_path: Path) -> None:
    log = tmp_path / "cycle_0.log"
    log.write_text(LOG)
    verdict = analyze_file(log).to_dict()
    assert verdict["primary"]["failure_class"] == "nccl_error"
    assert verdict["primary"]["rank"] == 1
    assert [c["failure_class"] for c in verdict["cascades"]] == ["gloo_peer_connection_lost"]


def test_peer_connection_loss_alone_is_not_a_workload_stop(tmp_path: Path) -> None:
    log = tmp_path / "cycle_0.log"
    log.write_text(LOG.splitlines(keepends=True)[3])
    assert analyze_file(log).decision == "RESTART"
