"""Progress that knows startup (issue 18 item 1): cycles that fail before their first
iteration have no progress relative to the job, so identical workload failures stop at the
2nd cycle and anything else ends at the job ceiling; "unknown" stays where it is honest."""

from __future__ import annotations

import pytest

from relaunch.restart_agent import PolicyConfig
from tests._agent_helpers import fact, run_job

IMPORT_3RD = "".join(
    f'[rank{r}]:   File "/usr/lib/python3.11/site-packages/transformers/__init__.py", line 9, in <module>\n'
    f"[rank{r}]: ModuleNotFoundError: No module named 'flash_attn'\n"
    for r in range(4)
)
STARTUP_BUGS = {
    "third_party_import": IMPORT_3RD,
    "missing_dataset": "[rank0]: FileNotFoundError: [Errno 2] No such file or directory: '/data/train.bin'\n",
    "unexpected_kwarg": "[rank1]: TypeError: forward() got an unexpected keyword argument 'attention_mask'\n",
    "shape_mismatch": "[rank0]: RuntimeError: The size of tensor a (4096) must match the size of tensor b (2048) at non-singleton dimension 3\n",
    "state_dict_size": "[rank0]: RuntimeError: Error(s) in loading state_dict for GPT: size mismatch for wte.weight: copying a param with shape [50304, 768] from checkpoint\n",
    "ckpt_key_error": "[rank0]: KeyError: 'model_state_dict'\n",
    "ddp_unused": "[rank2]: RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one.\n",
    "generic_runtime_error": "[rank0]: RuntimeError: expected scalar type Float but found Half\n",
    # an exception no row names, raised in the user's own frame (structural, issue 24)
    "custom_exception": (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/work/train.py", line 9, in main\n'
        "[rank0]: mylib.errors.ShardReaderException: the shard list is empty\n"
    ),
}


@pytest.mark.parametrize("name", sorted(STARTUP_BUGS))
def test_identical_startup_workload_bug_stops_at_the_second_cycle(name: str) -> None:
    text = STARTUP_BUGS[name]
    first, second = run_job([text, text])
    assert (first.decision, first.rule) == ("RESTART", "restart.workload_first"), first.basis
    assert (second.decision, second.rule) == ("STOP", "stop.startup_recurrence"), second.basis
    assert second.history.progress_since_prior == "none"
    assert second.history.progress_basis == "no_progress_ever"
    assert second.history.failed_before_first_iteration is True
    assert second.history.identical_retries_without_progress == 1
    assert second.budgets.workload_recurrence_stop == 1
    assert second.budgets.workload_recurrences_left == 0


def test_script_not_found_is_classified_and_stops_on_its_recurrence() -> None:
    text = "[rank0]: /usr/bin/python3: can't open file '/workspace/train.py': [Errno 2] No such file or directory\n"
    first, second = run_job([text, text])
    assert first.primary.failure_class == "script_not_found"
    assert first.primary.entity == "/workspace/train.py"
    assert (first.decision, second.decision, second.rule) == (
        "RESTART",
        "STOP",
        "stop.startup_recurrence",
    )


def test_asserts_on_parallel_sizes_and_batch_arithmetic_are_invalid_config() -> None:
    for msg in (
        "AssertionError: Number of layers should be divisible by the pipeline-model-parallel size",
        "AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size 8 != 2 * 1 * 1",
    ):
        (v,) = run_job([f"[rank0]: {msg}\n"])
        assert (v.decision, v.rule) == ("STOP", "stop.invalid_config"), msg


def test_assert_in_argument_validation_is_invalid_config() -> None:
    text = (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/work/megatron/training/arguments.py", line 400, in validate_args\n'
        "[rank0]: AssertionError: unexpected value 3 for the schedule\n"
    )
    (v,) = run_job([text])
    assert (v.decision, v.rule) == ("STOP", "stop.invalid_config")
    same_elsewhere = text.replace("validate_args", "forward")
    (v,) = run_job([same_elsewhere])
    assert (v.decision, v.rule) == ("RESTART", "restart.workload_first")


def test_different_startup_bugs_are_no_recurrence_but_reach_the_job_ceiling() -> None:
    bugs = [STARTUP_BUGS[k] for k in sorted(STARTUP_BUGS)]
    verdicts = run_job(bugs[:6])
    assert [v.decision for v in verdicts[:5]] == ["RESTART"] * 5
    assert verdicts[5].rule == "stop.job_no_progress_ceiling"
    assert verdicts[5].history.consecutive_no_progress == 5
    assert verdicts[5].budgets.job_retries_left == 0


INFRA_STARTUP = {
    "nccl_init": "[rank3]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n",
    "hang_first_collective": "[relaunch] hang detected: rank 3 missed heartbeat for 600.0 s (timeout 600 s)\n",
    "xid": "NVRM: Xid (PCI:0000:3b:00): 79, pid=2216, name=python, GPU has fallen off the bus.\n",
}


@pytest.mark.parametrize("name", sorted(INFRA_STARTUP))
def test_identical_infrastructure_startup_failure_ends_only_at_the_job_ceiling(name: str) -> None:
    text = INFRA_STARTUP[name]
    verdicts = run_job([text] * 7)
    assert [v.decision for v in verdicts[:5]] == ["RESTART"] * 5, [v.rule for v in verdicts]
    assert verdicts[5].rule == "stop.job_no_progress_ceiling"
    assert verdicts[5].history.same_root_retries_without_progress == 0  # startup: not counted
    assert verdicts[4].budgets.job_retries_left == 1


def test_job_ceiling_is_configurable() -> None:
    text = INFRA_STARTUP["nccl_init"]
    verdicts = run_job([text] * 3, PolicyConfig(job_no_progress_ceiling=2))
    assert [v.decision for v in verdicts] == ["RESTART", "RESTART", "STOP"]


def test_workload_bug_after_the_job_progressed_is_unknown_without_lines() -> None:
    bug = STARTUP_BUGS["generic_runtime_error"]
    progressed = "[rank0]: step 10 | loss 2\n[rank0]: step 500 | loss 1\n" + bug
    verdicts = run_job([progressed, bug, bug])
    assert verdicts[1].rule == "restart.progress_unknown"
    assert verdicts[2].rule == "restart.progress_unknown"
    assert verdicts[2].history.progress_basis == "job_progressed_before"


def test_launcher_no_iteration_fact_makes_a_resumed_cycle_a_startup_failure() -> None:
    bug = STARTUP_BUGS["ckpt_key_error"]
    progressed = "[rank0]: step 10 | loss 2\n[rank0]: step 500 | loss 1\n" + INFRA_STARTUP["xid"]
    no_iter = fact("iterations", last={}, silent=[0, 1], client=True)
    verdicts = run_job([progressed, no_iter + bug, no_iter + bug])
    assert verdicts[1].history.progress_basis == "launcher_no_iteration"
    assert verdicts[1].rule == "restart.workload_first"
    assert (verdicts[2].decision, verdicts[2].rule) == ("STOP", "stop.startup_recurrence")


def test_short_cycle_by_the_launcher_clock_is_a_startup_failure() -> None:
    bug = STARTUP_BUGS["ckpt_key_error"]
    progressed = "[rank0]: step 10 | loss 2\n[rank0]: step 500 | loss 1\n" + INFRA_STARTUP["xid"]
    short = fact("cycle_end", outcome="failed", duration_s=42.0)
    verdicts = run_job([progressed, short + bug, short + bug])
    assert verdicts[2].history.progress_basis == "startup_window"
    assert verdicts[2].rule == "stop.startup_recurrence"


def test_long_silent_cycle_is_unknown_not_a_startup_loop() -> None:
    nccl = INFRA_STARTUP["nccl_init"]
    long = fact("cycle_end", outcome="failed", duration_s=36000.0)
    verdicts = run_job([long + nccl] * 10)
    assert all(v.decision == "RESTART" for v in verdicts), [v.rule for v in verdicts]
    assert verdicts[-1].rule == "restart.progress_unknown"
    assert verdicts[-1].history.progress_basis == "long_silent_cycle"
    assert "36000 s" in verdicts[-1].basis
    # the window is configuration: with a longer one the same cycles are startup failures
    cfg = PolicyConfig(startup_window_s=100000.0)
    assert run_job([long + nccl] * 6, cfg)[-1].rule == "stop.job_no_progress_ceiling"


def test_launcher_iterations_are_progress() -> None:
    nccl = INFRA_STARTUP["nccl_init"]
    logs = [
        fact("iterations", last={"0": 100 * (i + 1), "1": 100 * (i + 1)}, client=True) + nccl
        for i in range(8)
    ]
    verdicts = run_job(logs)
    assert all(v.decision == "RESTART" for v in verdicts)
    assert verdicts[-1].rule == "restart.progress"
    assert (
        verdicts[-1].progress.source == "launcher" and verdicts[-1].progress.last_iteration == 800
    )


def test_python_dash_m_with_a_missing_module_stops_on_its_recurrence() -> None:
    """`relaunch run -m pkg.missing`: every rank's interpreter prints one line, no traceback.
    It is the launch command's bug: a workload root, stopped when it recurs at startup."""
    log = "".join(f"[rank{r}]: /usr/bin/python3: No module named s.nonexistent\n" for r in (0, 1))
    first, second = run_job([log, log])
    assert first.primary.failure_class == "module_not_found" and first.decision == "RESTART"
    assert (second.decision, second.rule) == ("STOP", "stop.startup_recurrence")
