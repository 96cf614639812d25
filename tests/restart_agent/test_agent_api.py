"""The restart agent's public API: scan_file, LogScanner, decide, analyze_file."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import relaunch.restart_agent as ra
from relaunch.restart_agent.model import PriorCycle

LOG = """\
[rank0]: [2026-12-02 10:00:00] iteration      100/  500000 | consumed samples: 51200 | lm loss: 2.3E+00 |
[rank1]: Traceback (most recent call last):
[rank3]: Traceback (most recent call last):
[rank1]:   File "/work/train.py", line 42, in <module>
[rank3]:   File "/work/train.py", line 42, in <module>
[rank3]:     main()
[rank1]:   File "/usr/lib/python3/site-packages/torch/nn/modules/module.py", line 1500, in _call_impl
[rank3]:   File "/work/model.py", line 7, in forward
[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered
[rank1]: RuntimeError: NCCL communicator was aborted on rank 1. Original reason for failure was: [Rank 1] Watchdog caught collective operation timeout
[rank2]:[E1202 10:11:12.123456 1234 ProcessGroupNCCL.cpp:616] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE) ran for 600012 milliseconds before timing out.
W1202 10:12:00.000 torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 1234 closing signal SIGTERM
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
"""


def test_scan_file_finds_initiating_cuda_error(tmp_path: Path) -> None:
    path = tmp_path / "cycle.log"
    path.write_text(LOG)
    ev = ra.scan_file(path)
    assert ev.primary is not None
    assert ev.primary.failure_class == "cuda_illegal_memory_access"
    assert (ev.primary.line, ev.primary.rank) == (9, 3)
    assert ev.primary.entity == "/work/model.py:7"
    assert [c["line"] for c in ev.primary.context] == [5, 8]
    classes = {c.failure_class: c for c in ev.cascades}
    assert classes["nccl_watchdog_timeout"].ranks == [2]
    assert classes["nccl_comm_aborted"].ranks == [1]
    assert ev.ranks_seen == [0, 1, 2, 3]
    assert ev.lines == 13 and ev.bytes == len(LOG.encode())
    assert ev.progress.known and ev.progress.last_iteration == 100


def test_log_scanner_equals_scan_file_for_random_chunkings(tmp_path: Path) -> None:
    data = LOG.encode()
    path = tmp_path / "cycle.log"
    path.write_bytes(data)
    expected = ra.scan_file(path)
    rnd = random.Random(7)
    for _ in range(60):
        s = ra.LogScanner()
        i = 0
        while i < len(data):
            n = rnd.randint(1, 40)
            s.feed(data[i : i + n])
            i += n
        assert s.finish() == expected


def test_analyze_file_and_decide_agree(tmp_path: Path) -> None:
    path = tmp_path / "cycle.log"
    path.write_text(LOG)
    v = ra.analyze_file(path)
    d = ra.decide(ra.scan_file(path), ())
    assert v.decision == d.decision == "RESTART"
    assert v.rule == d.rule
    out = v.to_dict()
    assert out["primary"]["line"] == 9
    assert out["llm"] == {"contributed": False}
    prior = PriorCycle.from_verdict(0, out)
    assert prior.fingerprint == v.primary.fingerprint


def test_missing_file_raises_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        ra.scan_file(tmp_path / "nope.log")
    with pytest.raises(IsADirectoryError):
        ra.scan_file(tmp_path)
