"""The verdict policy (restart_agent.policy.decide): every rule and every budget edge."""

from __future__ import annotations

import pytest

from relaunch.restart_agent import PolicyConfig, PriorCycle, decide
from tests._agent_helpers import scan_text

CUDA = "[rank3]: RuntimeError: CUDA error: unspecified launch failure\n"  # infrastructure
KEYERR = "[rank3]: KeyError: 'input_ids'\n"  # probable workload bug
UNKNOWN = "[rank3]: RuntimeError: something odd\n"  # no row names it: probable workload
NETIB = "[rank3]: node3:1:2 [3] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<40527> with error 12\n"


def log(failure: str, last_it: int | None, first_it: int = 1) -> str:
    prog = (
        ""
        if last_it is None
        else f"[rank0]: step {first_it} | loss 2\n[rank0]: step {last_it} | loss 2\n"
    )
    return prog + failure


def prior(cycle: int, text: str, last_it: int | None) -> PriorCycle:
    v = decide(scan_text(log(text, last_it)), ())
    return PriorCycle.from_verdict(cycle, v.to_dict())


def verdict(text: str, last_it: int | None, history=(), **cfg):
    return decide(scan_text(log(text, last_it)), history, PolicyConfig(**cfg))


def test_first_infrastructure_failure_restarts_with_budgets_named() -> None:
    v = verdict(CUDA, 50)
    assert (v.decision, v.rule) == ("RESTART", "restart.infrastructure")
    assert v.budgets.same_root_no_progress_retries == 3
    assert v.budgets.same_root_retries_left == 3
    assert v.history.same_root_prior_cycles == 0
    assert v.primary.failure_class == "cuda_launch_failure"
    assert v.evidence and v.evidence[0].line == 3
    assert v.llm.to_dict() == {"contributed": False}
    assert v.to_dict()["primary"]["fingerprint"] == v.primary.fingerprint


def test_infrastructure_same_root_ceiling_edges() -> None:
    hist = [prior(0, CUDA, 50)]
    for i in range(1, 3):
        v = verdict(CUDA, 50, hist)
        assert (v.decision, v.rule) == ("RESTART", "restart.infrastructure"), i
        assert v.history.same_root_retries_without_progress == i
        assert v.budgets.same_root_retries_left == 3 - i
        hist.append(prior(i, CUDA, 50))
    v = verdict(CUDA, 50, hist)
    assert (v.decision, v.rule) == ("STOP", "stop.same_root_ceiling")
    assert v.history.same_root_prior_cycles == 3
    assert v.budgets.same_root_retries_left == 0


def test_configured_ceiling_is_honoured() -> None:
    hist = [prior(0, CUDA, 50)]
    v = verdict(CUDA, 50, hist, same_root_no_progress_retries=1)
    assert (v.decision, v.rule) == ("STOP", "stop.same_root_ceiling")
    v = verdict(CUDA, 50, hist, same_root_no_progress_retries=2)
    assert v.decision == "RESTART"


def test_progress_between_cycles_resets_the_counts() -> None:
    hist = [prior(0, CUDA, 50), prior(1, CUDA, 50), prior(2, CUDA, 50)]
    v = verdict(CUDA, 80, hist)
    assert (v.decision, v.rule) == ("RESTART", "restart.progress")
    assert v.history.progress_since_prior == "advanced"
    hist.append(prior(3, CUDA, 80))
    v = verdict(CUDA, 80, hist)  # one retry without progress since the advance
    assert (v.decision, v.rule) == ("RESTART", "restart.infrastructure")
    assert v.history.same_root_retries_without_progress == 1


def test_unknown_progress_never_stops_on_counts() -> None:
    # "unknown" only once the job progressed before (a cycle that never reported progress
    # in a job that never progressed is a startup failure: tests/restart_agent/test_agent_startup.py)
    hist = [prior(0, CUDA, 50)] + [prior(i, CUDA, None) for i in range(1, 10)]
    v = verdict(CUDA, None, hist)
    assert (v.decision, v.rule) == ("RESTART", "restart.progress_unknown")
    assert v.history.progress_since_prior == "unknown"
    assert v.history.progress_basis == "job_progressed_before"
    hist = [prior(0, KEYERR, 50)] + [prior(i, KEYERR, None) for i in range(1, 4)]
    v = verdict(KEYERR, None, hist)
    assert (v.decision, v.rule) == ("RESTART", "restart.progress_unknown")


def test_unknown_cycles_in_between_neither_count_nor_reset() -> None:
    hist = [prior(0, CUDA, 50), prior(1, CUDA, None), prior(2, CUDA, 50), prior(3, CUDA, 50)]
    v = verdict(CUDA, 50, hist)
    assert v.history.same_root_retries_without_progress == 3
    assert v.rule == "stop.same_root_ceiling"


def test_probable_workload_bug_stops_on_first_identical_recurrence() -> None:
    v = verdict(KEYERR, 50)
    assert (v.decision, v.rule) == ("RESTART", "restart.workload_first")
    v = verdict(KEYERR, 50, [prior(0, KEYERR, 50)])
    assert (v.decision, v.rule) == ("STOP", "stop.workload_recurrence")
    assert v.history.identical_prior_cycles == 1


def test_workload_recurrence_with_progress_restarts() -> None:
    v = verdict(KEYERR, 90, [prior(0, KEYERR, 50)])
    assert (v.decision, v.rule) == ("RESTART", "restart.progress")


def test_different_workload_bug_is_not_a_recurrence() -> None:
    other = "[rank3]: KeyError: 'labels_that_differ_a_lot'\n"
    v = verdict(KEYERR, 50, [prior(0, other, 50)])
    assert v.decision == "RESTART" and v.rule == "restart.workload_first"


def test_job_ceiling_counts_alternating_roots() -> None:
    # two infrastructure roots (a generic RuntimeError would be a probable workload bug and
    # stop on its own first recurrence)
    roots = [CUDA, NETIB]
    hist = [prior(i, roots[i % 2], 50) for i in range(5)]
    v = verdict(roots[5 % 2], 50, hist)
    assert (v.decision, v.rule) == ("STOP", "stop.job_no_progress_ceiling")
    assert v.history.consecutive_no_progress == 5
    v = verdict(roots[4 % 2], 50, hist[:4])
    assert v.decision == "RESTART"
    assert v.budgets.job_retries_left == 1


def test_syntax_error_stops_immediately_even_without_history() -> None:
    text = "[rank0]:   File \"/work/model.py\", line 88\n[rank0]: SyntaxError: expected ':'\n"
    v = decide(scan_text(text), ())
    assert (v.decision, v.rule) == ("STOP", "stop.certain_workload_bug")


def test_user_import_error_on_every_rank_stops_immediately() -> None:
    # the user's own package (its name is in the user's path) on every rank: certain
    text = "".join(
        f'[rank{r}]:   File "/work/mymodel/tools/train.py", line 5, in <module>\n'
        f"[rank{r}]: ModuleNotFoundError: No module named 'mymodel.layers'\n"
        for r in range(4)
    )
    v = decide(scan_text(text), ())
    assert (v.decision, v.rule) == ("STOP", "stop.user_import_error")


def test_import_of_a_module_not_in_the_users_paths_is_probable() -> None:
    # 'mymodel' may be a package missing from this environment: STOP on recurrence only
    text = "".join(
        f'[rank{r}]:   File "/work/train.py", line 5, in <module>\n'
        f"[rank{r}]: ModuleNotFoundError: No module named 'mymodel'\n"
        for r in range(4)
    )
    v = decide(scan_text(text), ())
    assert (v.decision, v.rule) == ("RESTART", "restart.workload_first")


def test_import_error_inside_a_library_or_on_some_ranks_only_is_probable() -> None:
    lib = (
        '[rank0]:   File "/usr/lib/python3.11/site-packages/torch/__init__.py", line 5, in <module>\n'
        "[rank0]: ImportError: libcudnn.so.9: cannot open shared object file\n"
    )
    v = decide(scan_text(lib), ())
    assert (v.decision, v.rule) == ("RESTART", "restart.workload_first")
    mixed = (
        '[rank0]:   File "/work/train.py", line 5, in <module>\n'
        "[rank0]: ModuleNotFoundError: No module named 'mymodel'\n"
        "[rank1]: RuntimeError: CUDA error: unspecified launch failure\n"
    )
    assert decide(scan_text(mixed), ()).rule != "stop.user_import_error"


def test_invalid_argument_before_any_progress_stops_and_after_progress_does_not() -> None:
    text = "[rank0]: train.py: error: unrecognized arguments: --lr-warmup 3\n"
    v = decide(scan_text(text), ())
    assert (v.decision, v.rule) == ("STOP", "stop.invalid_config")
    v = decide(scan_text("[rank0]: step 40 | loss 1\n" + text), ())
    assert (v.decision, v.rule) == ("RESTART", "restart.workload_first")


def test_scheduler_time_limit_stops_and_preemption_restarts() -> None:
    tl = "slurmstepd: error: *** JOB 7 ON node1 CANCELLED AT 2026-12-02T10:00:01 DUE TO TIME LIMIT ***\n"
    assert decide(scan_text(tl), ()).rule == "stop.scheduler_terminated"
    pre = "slurmstepd: error: *** STEP 7.0 ON node1 CANCELLED AT 2026-12-02T10:00:01 DUE TO PREEMPTION ***\n"
    v = decide(scan_text(pre), ())
    assert (v.decision, v.rule) == ("RESTART", "restart.infrastructure")


def test_no_evidence_restarts() -> None:
    v = decide(scan_text("[rank0]: step 3 | loss 2\n"), ())
    assert (v.decision, v.rule) == ("RESTART", "restart.no_evidence")
    assert v.primary is None


NCCL_ONLY = "".join(
    f"[rank{r}]: [E1202 10:21:13 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective"
    f" operation timeout: WorkNCCL(SeqNum=8, OpType=ALLREDUCE) ran for 600123 milliseconds before timing out.\n"
    for r in (1, 2, 0, 3)
)


def test_cascades_only_and_flight_recorder_culprit() -> None:
    v = decide(scan_text(NCCL_ONLY), ())
    assert (v.decision, v.rule) == ("RESTART", "restart.cascade_only")
    assert v.primary.role == "cascade" and v.primary.rank == 1
    v = decide(scan_text(NCCL_ONLY), (), fr_culprit_ranks=[3])
    assert v.primary.rank == 3 and v.primary.line == 4
    assert v.fr is not None and v.fr.culprit_ranks == [3]


@pytest.mark.parametrize("field", ["same_root_prior_cycles", "consecutive_no_progress"])
def test_history_fields_of_the_cli_contract_are_present(field: str) -> None:
    assert field in verdict(CUDA, 5).to_dict()["history"]
