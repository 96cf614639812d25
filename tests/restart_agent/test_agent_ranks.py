"""Rank attribution from every source (issue 18 item 4), each recorded as `rank_source`,
and bounded numbers: an absurd rank is "no rank", never an exception (issue 12 item 3)."""

from __future__ import annotations

import pytest

from relaunch.restart_agent import PolicyConfig, decide
from tests._agent_helpers import scan_text

# torch elastic's summary, as torchrun prints it (format of torch/distributed/elastic/
# multiprocessing/errors/__init__.py, seen verbatim in public issue threads)
ELASTIC_SUMMARY = """\
E0325 20:57:27.620000 2606 site-packages/torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 1 (pid: 14751) of binary: /root/miniconda3/bin/python
Traceback (most recent call last):
  File "/root/miniconda3/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/root/miniconda3/lib/python3.12/site-packages/torch/distributed/launcher/api.py", line 269, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2025-05-21_15:43:04
  host      : worker-0
  rank      : 2 (local_rank: 2)
  exitcode  : -15 (pid: 14752)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 14752
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-05-21_15:43:03
  host      : worker-0
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 14751)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 14751
============================================================
"""


def test_elastic_root_cause_names_the_rank_of_a_sigkill() -> None:
    ev = scan_text("[rank0]: step 3 | loss 2\n" + ELASTIC_SUMMARY)
    sources = {(x.source, x.rank, x.exitcode, x.pid) for x in ev.exits}
    assert ("elastic_root_cause", 1, -9, 14751) in sources
    assert ("elastic_failure", 2, -15, 14752) in sources
    assert ("elastic_exit", None, -9, 14751) in sources
    v = decide(ev)
    assert v.primary.rank == 1
    assert v.primary.rank_source == "elastic_root_cause"
    assert v.primary.failure_class == "killed_sigkill"
    assert "not in the log" not in v.basis


def test_elastic_agent_failed_line_names_the_local_rank_on_one_node() -> None:
    line = "E0325 20:57:27.620000 2606 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -11) local_rank: 5 (pid: 2630) of binary: /usr/bin/python\n"
    v = decide(scan_text("[rank0]: step 3 | loss 2\n" + line))
    assert (v.primary.rank, v.primary.rank_source) == (5, "elastic_exit")
    assert v.primary.failure_class == "segfault"


def test_kernel_oom_kill_is_tied_to_the_rank_whose_pid_died() -> None:
    kernel = "[1234567.891] Out of memory: Killed process 14751 (python) total-vm:92345678kB\n"
    v = decide(scan_text(kernel + ELASTIC_SUMMARY))
    assert v.primary.failure_class == "host_oom_kill"
    assert (v.primary.rank, v.primary.rank_source) == (1, "kernel")


def test_xid_is_tied_to_the_rank_by_its_pid() -> None:
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=14752, name=python, GPU has fallen off the bus.\n"
    v = decide(scan_text(xid + ELASTIC_SUMMARY))
    assert v.primary.failure_class == "gpu_fallen_off_bus"
    assert (v.primary.rank, v.primary.rank_source) == (2, "kernel")


def test_rank_inside_an_nccl_message_without_prefix() -> None:
    line = "[E626 06:24:44.906457629 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 6] Process group watchdog thread terminated with exception: NCCL error: unhandled system error\n"
    v = decide(scan_text(line))
    assert (v.primary.rank, v.primary.rank_source) == (6, "message")
    prefixed = decide(scan_text("[rank2]: RuntimeError: CUDA error: unspecified launch failure\n"))
    assert (prefixed.primary.rank, prefixed.primary.rank_source) == (2, "prefix")


def test_timeout_cascade_names_the_silent_rank() -> None:
    progress = "".join(f"[rank{r}]: step 7 | loss 2\n" for r in range(4))
    timeouts = "".join(
        f"[rank{r}]: [E626 06:24:44 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective"
        " operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE) ran for 600020 milliseconds before timing out.\n"
        for r in (0, 1, 3)
    )
    v = decide(scan_text(progress + timeouts))
    assert (v.primary.rank, v.primary.rank_source) == (2, "silent_rank")
    assert v.rule == "restart.cascade_only"
    assert "Every rank but rank 2" in v.basis
    # all ranks timed out: nobody is singled out
    all4 = timeouts + timeouts.replace("rank3", "rank2").replace("Rank 3", "Rank 2")
    v = decide(scan_text(progress + all4))
    assert v.primary.rank_source != "silent_rank"


ABSURD = [
    "[rank" + "9" * 5000 + "]: RuntimeError: CUDA error: unspecified launch failure",
    "18446744073709551616: RuntimeError: CUDA error: unspecified launch failure",
    "[1," + "7" * 40 + "]<stderr>: RuntimeError: CUDA error: unspecified launch failure",
    "[relaunch] hang detected: rank " + "4" * 4400 + " missed heartbeat",
    "[E1 ProcessGroupNCCL.cpp:1] [Rank " + "3" * 5000 + "] NCCL error: unhandled system error",
    "  rank      : " + "1" * 5000 + " (local_rank: 0)\n  exitcode  : -9 (pid: " + "2" * 5000 + ")",
    "failed (exitcode: -" + "9" * 5000 + ") local_rank: " + "5" * 5000 + " (pid: 1)",
]


@pytest.mark.parametrize("line", ABSURD, ids=range(len(ABSURD)))
def test_absurd_rank_numbers_give_no_rank_never_an_exception(line: str) -> None:
    ev = scan_text(line + "\n")
    v = decide(ev)
    assert v.primary is None or v.primary.rank is None
    assert all(r < 10**8 for r in ev.ranks_seen)


def test_policy_config_from_mapping_validates_and_round_trips() -> None:
    cfg = PolicyConfig.from_mapping({"job_no_progress_ceiling": 7, "startup_window_s": 120})
    assert cfg.job_no_progress_ceiling == 7 and cfg.startup_window_s == 120.0
    assert PolicyConfig.from_mapping(cfg.to_dict()) == cfg
    assert PolicyConfig.from_mapping(None) == PolicyConfig()
    assert set(PolicyConfig().to_dict()) == {
        "same_root_no_progress_retries",
        "job_no_progress_ceiling",
        "workload_recurrence_stop",
        "startup_window_s",
    }


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({"job_ceiling": 3}, "unknown policy config key(s): job_ceiling"),
        ({"job_no_progress_ceiling": 0}, "job_no_progress_ceiling must be an integer from 1"),
        ({"job_no_progress_ceiling": 2.5}, "must be an integer"),
        ({"job_no_progress_ceiling": True}, "must be an integer"),
        ({"same_root_no_progress_retries": "3"}, "must be an integer"),
        ({"startup_window_s": -1}, "startup_window_s must be a number from 0"),
        ({"startup_window_s": float("nan")}, "startup_window_s must be a number"),
        ({"workload_recurrence_stop": 10**30}, "must be an integer from 1 to 1000"),
        ([1, 2], "must be a mapping"),
    ],
)
def test_policy_config_from_mapping_rejects_bad_input_with_one_clear_line(bad, says) -> None:
    with pytest.raises(ValueError) as err:
        PolicyConfig.from_mapping(bad)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_hardware_fault_later_in_the_cycle_wins_over_a_probable_workload_root() -> None:
    text = (
        "[rank3]: RuntimeError: expected scalar type Float but found Half\n"
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
        "NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, name=python, An uncorrectable double bit error (DBE) has been detected\n"
    )
    v = decide(scan_text(text))
    assert v.primary.failure_class == "gpu_ecc_error"
    assert "infrastructure root" in v.fan_out.primary_reason
    # a certain workload bug is not overridden
    syntax = "[rank0]: SyntaxError: invalid syntax\n" + text
    assert decide(scan_text(syntax)).rule == "stop.certain_workload_bug"


def test_a_bare_slurm_cancel_yields_to_the_line_that_gives_preemption_as_reason() -> None:
    text = (
        "slurmstepd: error: *** STEP 3736.0 ON node5 CANCELLED AT 2021-03-15T17:50:23 ***\n"
        "slurmstepd: error: *** JOB 3736 ON node5 CANCELLED AT 2021-03-15T18:00:46 DUE TO PREEMPTION ***\n"
    )
    v = decide(scan_text(text))
    assert (v.decision, v.primary.failure_class) == ("RESTART", "preemption")
    # a bare STEP cancel is srun's teardown of the step (review finding 2): no STOP; a bare
    # JOB cancel is the user's scancel
    bare = text.splitlines(keepends=True)[0]
    assert decide(scan_text(bare)).decision == "RESTART"
    job = "slurmstepd: error: *** JOB 3736 ON node5 CANCELLED AT 2021-03-15T17:50:23 ***\n"
    assert decide(scan_text(job)).rule == "stop.scheduler_terminated"


def test_stacked_and_stream_prefixes() -> None:
    ev = scan_text("[default0]:[rank12]: RuntimeError: CUDA error: unspecified launch failure\n")
    assert (ev.primary.rank, ev.primary.rank_source) == (12, "prefix")
    ev = scan_text(
        "15: [rank15]: AssertionError: num_layers should be divisible by pipeline_model_parallel_size\n"
    )
    assert (ev.primary.rank, ev.primary.failure_class) == (15, "invalid_config")
    ev = scan_text("[stderr]ModuleNotFoundError: No module named 'tensorboard'\n")
    assert ev.primary.failure_class == "python_import_error" and ev.primary.rank is None


def test_srun_task_names_the_rank_and_nan_messages_name_theirs() -> None:
    ev = scan_text("srun: error: node17: task 289: Bus error\n")
    assert (ev.primary.failure_class, ev.primary.rank, ev.primary.rank_source) == (
        "sigbus",
        289,
        "message",
    )
    ev = scan_text("RuntimeError: Rank 3: found NaN in local grad norm in backward pass\n")
    assert (ev.primary.failure_class, ev.primary.rank) == ("nan_loss", 3)
