"""Issue 24: verdicts on failures no row names, and loops a row-per-shape table misses.

- structural classification of an exception no specific row names (taxonomy.yaml
  `structural`): unknown infrastructure never STOPs on one recurrence, a workload-leaning
  exception still stops at the second identical startup cycle;
- CUDA OOM by phase: identical on two startup cycles STOPs, after progress it is retryable;
- an all-rank collective timeout at one sequence number on consecutive cycles that never
  progressed is a desync loop (STOP at the second), unless a link fault, a silent rank or a
  different sequence number says otherwise.

Every job goes through `decide` with stored verdicts (`run_job`), as the service runs it.
"""

from __future__ import annotations

import pytest

from relaunch.restart_agent import NodeHealthNote, PriorCycle, decide
from relaunch.restart_agent.structural import lean, structural
from tests._agent_helpers import run_job, scan_text


def _tb(frames: list[tuple[str, str]], error: str, rank: int = 0) -> str:
    out = [f"[rank{rank}]: Traceback (most recent call last):"]
    out += [f'[rank{rank}]:   File "{path}", line 10, in {fn}' for path, fn in frames]
    out.append(f"[rank{rank}]: {error}")
    return "\n".join(out) + "\n"


USER = ("/work/train.py", "main")
TORCH_CUDA = ("/opt/venv/lib/python3.11/site-packages/torch/cuda/__init__.py", "_lazy_init")
SERIAL = ("/opt/venv/lib/python3.11/site-packages/torch/serialization.py", "_save")
NN = ("/opt/venv/lib/python3.11/site-packages/torch/nn/functional.py", "linear")

# exceptions no specific row names whose structure leans infrastructure (or nowhere): an
# identical recurrence at startup must not STOP
UNKNOWN_INFRASTRUCTURE = {
    "runtime_init_error_code": _tb(
        [USER, TORCH_CUDA],
        "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
        "functions before calling NumCudaDevices() that might have already set an error? "
        "Error 804: forward compatibility was attempted on non supported HW",
    ),
    "accelerator_runtime_acl": _tb(
        [USER], "RuntimeError: ACL error code 507033, call aclrtSetDevice failed"
    ),
    "node_marked_dead": (
        "ray.exceptions.NodeDiedError: The node with node id 3f2a has been marked dead "
        "because the detector has missed too many heartbeats from it.\n"
    ),
    "stream_writer_write_failed": _tb(
        [USER, SERIAL],
        "RuntimeError: [enforce fail at inline_container.cc:603] . PytorchStreamWriter "
        "failed writing file data/12: file write failed",
    ),
    "enforce_fail_native_nothing_else": _tb(
        [USER, SERIAL],
        "RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 2432 vs 2326",
    ),
    "remote_io_errno": _tb([USER], "OSError: [Errno 121] Remote I/O error"),
    "busy_device": "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable\n",
    "bare_unknown_exception": "[rank0]: RuntimeError: something odd happened in the reader\n",
    # a runtime's canonical status code for a fault that is not the program's (absl / gRPC),
    # raised through a library's Python frame (which alone would lean workload)
    "runtime_status_unknown": _tb(
        [USER, ("/opt/venv/lib/python3.10/site-packages/torch_xla/core/xla_model.py", "devs")],
        "RuntimeError: Bad StatusOr access: UNKNOWN: TPU initialization",
    ),
    # the node's shared memory / open-file limit, raised through the DataLoader's Python
    "shared_memory_object": _tb(
        [USER, NN],
        "RuntimeError: unable to open shared memory object </torch_123_456> in read-write "
        "mode: Too many open files (24)",
    ),
    # a kernel's illegal instruction: a miscompiled kernel or a failing GPU (as an illegal
    # memory access), so `unknown`
    "illegal_instruction": _tb(
        [USER, NN], "RuntimeError: CUDA error: an illegal instruction was encountered"
    ),
    # torch's internal assert on an NVML call, its C++ position in the `"x.cpp":N` form
    "nvml_internal_assert": _tb(
        [USER, NN],
        'RuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED at "../c10/cuda/'
        'CUDACachingAllocator.cpp":830, please report a bug to PyTorch.',
    ),
}

# exceptions no specific row names whose structure leans workload: STOP at the 2nd cycle
WORKLOAD_LEANING = {
    "raised_in_user_frame": _tb([USER], "mylib.errors.ShardError: the shard list is empty"),
    "same_device_check": _tb(
        [USER, NN],
        "RuntimeError: Expected all tensors to be on the same device, but found at least "
        "two devices, cuda:0 and cpu!",
    ),
    "misaligned_address_kernel": "[rank0]: RuntimeError: CUDA error: misaligned address\n",
}


@pytest.mark.parametrize("name", sorted(UNKNOWN_INFRASTRUCTURE))
def test_unknown_infrastructure_never_stops_on_one_recurrence(name: str) -> None:
    text = UNKNOWN_INFRASTRUCTURE[name]
    verdicts = run_job([text] * 6)
    assert verdicts[0].primary is not None and verdicts[0].primary.domain != "workload", verdicts[
        0
    ].primary
    if verdicts[0].primary.pattern_id in structural().rows:
        # (a specific row may name the shape since: `cluster.node_marked_dead`, holdout6)
        assert verdicts[0].primary.structural, "the basis of the structural classification is kept"
    assert [v.decision for v in verdicts[:5]] == ["RESTART"] * 5, [v.rule for v in verdicts]
    # the job ceiling still ends it: a missed STOP costs cycles, never forever
    assert (verdicts[5].decision, verdicts[5].rule) == ("STOP", "stop.job_no_progress_ceiling")


@pytest.mark.parametrize("name", sorted(WORKLOAD_LEANING))
def test_workload_leaning_exception_stops_at_the_second_startup_cycle(name: str) -> None:
    first, second = run_job([WORKLOAD_LEANING[name]] * 2)
    assert first.primary is not None and first.primary.domain == "workload", first.primary
    assert (first.decision, second.decision) == ("RESTART", "STOP"), (first.basis, second.basis)
    assert second.rule == "stop.startup_recurrence"


def test_structural_rows_ties_and_reasons() -> None:
    # balanced evidence leans RESTART: an infrastructure word against one workload word
    got = lean("RuntimeError: the device is gone while expected", [], None)
    assert got.domain == "infrastructure" and "balanced" in got.basis
    # nothing either way: unknown
    got = lean("RuntimeError: odd", [], None)
    assert (got.domain, got.recoverability) == ("unknown", "unknown")
    # a Python programming error type raised in Python code leans workload
    got = lean(
        "omegaconf.errors.ConfigKeyError: Key 'lr' is not in struct",
        ['File "/w/t.py", line 1, in f'],
        "/w/t.py:1",
    )
    assert (got.domain, got.recoverability) == ("workload", "probable")
    # an errno of a system call in the user's frame: the frame's place leans nowhere
    got = lean(
        "OSError: [Errno 22] Invalid argument: '/data/x'",
        ['File "/w/t.py", line 1, in f'],
        "/w/t.py:1",
    )
    assert got.domain == "unknown", got


OOM = _tb(
    [USER],
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.06 GiB is free.",
)
ITER = "[rank0]: iteration      100/   10000 | consumed samples: 1600 | lm loss: 2.1\n"


def test_cuda_oom_identical_on_two_startup_cycles_stops() -> None:
    first, second = run_job([OOM, OOM])
    assert (first.decision, first.rule) == ("RESTART", "restart.retryable_workload")
    assert (second.decision, second.rule) == ("STOP", "stop.startup_recurrence"), second.basis


def test_cuda_oom_after_progress_stays_retryable_within_the_same_root_ceiling() -> None:
    # the original and 3 same-root retries (same_root_no_progress_retries) without progress
    verdicts = run_job([ITER + OOM] * 4)
    rules = [v.rule for v in verdicts]
    assert rules[:3] == ["restart.retryable_workload"] * 3, rules
    assert (verdicts[3].decision, verdicts[3].rule) == ("STOP", "stop.same_root_ceiling"), rules


def _timeouts(seq: int, ranks: list[int], op: str = "ALLREDUCE") -> str:
    return "".join(
        f"[rank{r}]:[E1202 10:11:12.123456 1234 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog "
        f"caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n"
        for r in ranks
    )


def test_all_rank_timeout_at_one_collective_on_two_startup_cycles_is_a_desync_loop() -> None:
    log = _timeouts(3, [0, 1, 2, 3])
    first, second = run_job([log, log])
    assert first.fan_out.all_rank_timeout == "ALLREDUCE@3/4"
    assert (first.decision, first.rule) == ("RESTART", "restart.cascade_only")
    assert (second.decision, second.rule) == ("STOP", "stop.startup_recurrence"), second.basis
    assert "desync" in second.basis


@pytest.mark.parametrize(
    ("name", "second"),
    [
        ("other_sequence_number", _timeouts(4, [0, 1, 2, 3])),
        ("a_silent_rank", _timeouts(3, [0, 1, 3]) + "[rank2]: loading shard 7\n"),
        (
            "a_link_fault",
            _timeouts(3, [0, 1, 2, 3])
            + "[rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
            "remote process exited or there was a network error, NCCL version 2.21.5\n",
        ),
        (
            "the_job_progressed",
            _timeouts(3, [0, 1, 2, 3]).replace("[rank0]:[E", ITER + "[rank0]:[E"),
        ),
    ],
)
def test_all_rank_timeout_is_no_desync_loop_when(name: str, second: str) -> None:
    _, again = run_job([_timeouts(3, [0, 1, 2, 3]), second])
    assert again.decision == "RESTART", (name, again.rule, again.basis)


def test_all_rank_timeout_with_an_unhealthy_node_restarts() -> None:
    log = _timeouts(3, [0, 1, 2, 3])
    first = run_job([log])[0]
    import json

    history = [PriorCycle.from_verdict(0, json.loads(json.dumps(first.to_dict())))]
    sick = NodeHealthNote(node="n1", healthy=False, reason="nvlink down", ran_this_cycle=True)
    v = decide(scan_text(log), history, node_health=[sick])
    assert v.decision == "RESTART", v.basis


@pytest.mark.parametrize(
    ("text", "span"),
    [
        ("[2024-05-01 10:00:03,000] a\n[2024-05-01 10:02:03,500] b\n", 120.0),  # elastic/logging
        ("2024-06-01T10:00:04.123Z a\n2024-06-01T11:00:04.123Z b\n", 3600.0),  # ISO / k8s
        ("slurmstepd: error: *** JOB 9 ON n1 CANCELLED AT 2026-12-02T10:00:01 ***\n", None),
        (
            "[E1203 10:00:00.000000 12 ProcessGroupNCCL.cpp:616] a\n"
            "[E1203 10:10:00.000000 12 ProcessGroupNCCL.cpp:616] b\n",
            600.0,
        ),  # glog: NCCL's watchdog, torch's C++ logs
        ("I1231 23:59:00.000 1 f.cc:1] a\nI0101 00:01:00.000 1 f.cc:1] b\n", None),  # new year
        ("no timestamps here\n", None),
    ],
)
def test_cycle_duration_from_the_logs_own_timestamps(text: str, span: float | None) -> None:
    assert scan_text(text).progress.log_span_s == span


def test_log_span_separates_a_startup_failure_from_a_long_silent_cycle() -> None:
    root = "[rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    short = "[2024-05-01 10:00:03,000] start\n" + root + "[2024-05-01 10:00:40,000] end\n"
    long = "[2024-05-01 10:00:03,000] start\n" + root + "[2024-05-01 12:00:00,000] end\n"
    _, after_short = run_job([ITER + root, short])
    assert after_short.history.progress_basis == "startup_window"
    assert after_short.progress.duration_source == "log_timestamps"
    _, after_long = run_job([ITER + root, long])
    assert after_long.history.progress_basis == "long_silent_cycle", after_long.basis
    assert "timestamps" in after_long.basis
