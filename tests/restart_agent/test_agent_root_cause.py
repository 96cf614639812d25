"""Issue 24: launcher root-cause summaries read in every layout, rank and class from the
block's own fields: torch elastic's `Root Cause` entry with its `traceback :` field (the
error a few lines below the entry, after teardown began) and torch 1.9's layout (`Root
Cause:`, `rank: 1 (local_rank: 1)`, the `"message": "..."` JSON field), fields behind a lead
(timestamps), DeepSpeed's launcher (`--local_rank=N ... exits with return code = C`), Ray
Train's `[Rank N Error Snippet]`, Open MPI's `MPI_ABORT was invoked on rank N`.

Each log is decided as two identical cycles through stored verdicts (`run_job`).
"""

from __future__ import annotations

import pytest

from tests._agent_helpers import run_job, scan_text

NEW_TB = '[rank1]:[W1203 10:00:00.000000 123 ProcessGroupNCCL.cpp:4561] [PG ID 0 PG GUID 0 Rank 1] using GPU 1 to perform barrier as devices used by this process are currently unknown.\n[2024-05-01 10:00:03,000] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 4241 closing signal SIGTERM\n[2024-05-01 10:00:04,000] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1) local_rank: 3 (pid: 4242) of binary: /usr/bin/python\nTraceback (most recent call last):\n  File "/usr/bin/torchrun", line 8, in <module>\n    sys.exit(main())\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n============================================================\ntrain.py FAILED\n------------------------------------------------------------\nFailures:\n  <NO_OTHER_FAILURES>\n------------------------------------------------------------\nRoot Cause (first observed failure):\n[0]:\n  time      : 2024-05-01_10:00:04\n  host      : node-1\n  rank      : 3 (local_rank: 3)\n  exitcode  : 1 (pid: 4242)\n  error_file: /tmp/torchelastic_abc/none_x/attempt_0/3/error.json\n  traceback : Traceback (most recent call last):\n    File "/opt/conda/lib/python3.10/site-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 346, in wrapper\n      return f(*args, **kwargs)\n    File "/work/train.py", line 88, in main\n      assert cfg.tp * cfg.pp <= world\n  AssertionError: tensor parallel times pipeline parallel exceeds the world\n  \n============================================================\n'

OLD19 = 'ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 1 (pid: 12345) of binary: /usr/bin/python3\n***************************************\n            train.py FAILED            \n=======================================\nRoot Cause:\n[0]:\n  time: 2021-08-31_10:02:36\n  rank: 1 (local_rank: 1)\n  exitcode: 1 (pid: 12345)\n  error_file: /tmp/torchelastic_x/none_y/attempt_0/1/error.json\n  msg: {\n    "message": "AssertionError: batch size 7 is not divisible by 2",\n    "extraInfo": {\n      "py_callstack": "Traceback (most recent call last):\\n  File \\"/usr/local/lib/python3.8/site-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py\\", line 345, in wrapper\\n    return f(*args, **kwargs)\\n  File \\"train.py\\", line 10, in main\\n    assert False\\nAssertionError: batch size 7 is not divisible by 2\\n",\n      "timestamp": "1630404156"\n    }\n  }\n=======================================\nOther Failures:\n[1]:\n  time: 2021-08-31_10:02:36\n  rank: 0 (local_rank: 0)\n  exitcode: -15 (pid: 12344)\n  error_file: <N/A>\n  msg: "Signal 15 (SIGTERM) received by PID 12344"\n***************************************\n'

RAY2 = '2025-01-10 10:00:00,000 INFO worker_group.py:250 -- Started training worker group of size 4.\nray.train.v2.api.exceptions.WorkerGroupError: Training failed due to worker errors:\n[Rank 2 Error Snippet]:\nTraceback (most recent call last):\n  File "/home/ray/anaconda3/lib/python3.11/site-packages/ray/train/v2/_internal/execution/worker_group/thread_runner.py", line 30, in _run_target\n    result = target()\n  File "/home/ray/train.py", line 41, in train_func\n    loss = model(batch)\nRuntimeError: mat1 and mat2 shapes cannot be multiplied (32x512 and 256x10)\n'

MPIABORT = 'Traceback (most recent call last):\n  File "/work/train.py", line 12, in <module>\n    main()\n  File "/work/train.py", line 9, in main\n    raise RuntimeError("the shard list is empty")\nRuntimeError: the shard list is empty\n--------------------------------------------------------------------------\nMPI_ABORT was invoked on rank 5 in communicator MPI_COMM_WORLD\nwith errorcode 1.\n\nNOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.\n--------------------------------------------------------------------------\n'

LEAD = """\
[rank3]: Traceback (most recent call last):
[rank3]:   File "/work/train.py", line 22, in main
[rank3]: RuntimeError: ACL error code 507033, call aclrtSetDevice failed
2024-06-01T10:00:04.123Z E0601 10:00:04.000000 139 api.py:695] failed (exitcode: 1) local_rank: 3 (pid: 4242) of binary: /usr/bin/python
2024-06-01T10:00:04.200Z torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
2024-06-01T10:00:04.200Z Root Cause (first observed failure):
2024-06-01T10:00:04.200Z [0]:
2024-06-01T10:00:04.200Z   host      : npu-node-0
2024-06-01T10:00:04.200Z   rank      : 3 (local_rank: 3)
2024-06-01T10:00:04.200Z   exitcode  : 1 (pid: 4242)
2024-06-01T10:00:04.200Z   error_file: <N/A>
"""

DEEPSPEED = (
    "[2023-04-14 13:11:27,879] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 13266\n"
    "[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', "
    "'-u', 'main.py', '--local_rank=1', '--data_path', 'x'] exits with return code = -9\n"
)


@pytest.mark.parametrize(
    ("log", "decisions", "cls", "rank", "source"),
    [
        (NEW_TB, ("RESTART", "STOP"), "python_assertion_error", 3, "elastic_root_cause"),
        (OLD19, ("STOP", "STOP"), "invalid_config", 1, "elastic_root_cause"),
        (RAY2, ("RESTART", "STOP"), "tensor_shape_mismatch", 2, "ray_train"),
        (MPIABORT, ("RESTART", "STOP"), "python_exception", 5, "mpirun"),
        (LEAD, ("RESTART", "RESTART"), "python_exception", 3, "prefix"),
        (DEEPSPEED, ("RESTART", "RESTART"), "killed_sigkill", 1, "deepspeed"),
    ],
    ids=[
        "elastic_traceback_field",
        "elastic_1_9_message",
        "ray_train_snippet",
        "mpi_abort",
        "lead_npu",
        "deepspeed_minus9",
    ],
)
def test_root_cause_layouts(
    log: str, decisions: tuple[str, str], cls: str, rank: int, source: str
) -> None:
    first, again = run_job([log, log])
    assert (first.decision, again.decision) == decisions, (first.basis, again.basis)
    assert first.primary is not None
    assert (first.primary.failure_class, first.primary.rank, first.primary.rank_source) == (
        cls,
        rank,
        source,
    )


def test_fields_behind_a_lead_are_read() -> None:
    ev = scan_text(LEAD)
    got = [(x.source, x.rank, x.local_rank, x.exitcode) for x in ev.exits]
    assert ("elastic_root_cause", 3, 3, 1) in got


def test_an_assertion_in_the_root_cause_entry_is_not_infrastructure() -> None:
    # the ChildFailedError cascade came before the entry's own error (after teardown began):
    # the entry's AssertionError on its rank is the root, a workload bug
    first = run_job([NEW_TB])[0]
    assert first.primary is not None and first.primary.domain == "workload"
    assert first.fan_out.primary_reason.startswith("the error in torch elastic's Root Cause")


def test_a_peers_nccl_error_does_not_outrank_the_entrys_own_assertion() -> None:
    # rank 5's NCCL error came after rank 3 raised (its peer died); the Root Cause entry
    # says rank 3 raised AssertionError first: a workload root on rank 3, not infrastructure
    peer = (
        "[rank5]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
    )
    first, again = run_job([peer + NEW_TB] * 2)
    assert first.primary is not None
    assert (first.primary.failure_class, first.primary.rank) == ("python_assertion_error", 3)
    assert (first.decision, again.decision) == ("RESTART", "STOP")
