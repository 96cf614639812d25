"""restart_agent.policy.RULES: one test per entry of the rule table, and the table's order.

Each test builds the smallest evidence and history that makes its entry fire (the first
entry that fires decides) and checks the rule and the entry's own basis, through the real
scanner and `decide`.
"""

from __future__ import annotations

from dataclasses import replace

from relaunch.restart_agent import PolicyConfig, PriorCycle, decide
from relaunch.restart_agent.model import CycleEvidence, Rule, Verdict
from relaunch.restart_agent.policy import RULES
from tests._agent_helpers import scan_text

CUDA = "[rank3]: RuntimeError: CUDA error: unspecified launch failure\n"  # infrastructure
KEYERR = "[rank3]: KeyError: 'input_ids'\n"  # probable workload bug
OOM = "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
NCCL_ONLY = "".join(
    f"[rank{r}]: [E1202 10:21:13 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective"
    f" operation timeout: WorkNCCL(SeqNum=8, OpType=ALLREDUCE) ran for 600123 milliseconds before timing out.\n"
    for r in (1, 2, 0, 3)
)


def steps(last: int) -> str:
    return f"[rank0]: step 1 | loss 2\n[rank0]: step {last} | loss 2\n"


def job(cycles: list[CycleEvidence], config: PolicyConfig = PolicyConfig()) -> Verdict:  # noqa: B008
    """Decide every cycle in turn, each with the stored verdicts of the ones before it."""
    history: list[PriorCycle] = []
    v = None
    for i, ev in enumerate(cycles):
        v = decide(ev, history, config)
        history.append(PriorCycle.from_verdict(i, v.to_dict()))
    assert v is not None
    return v


def fired(v: Verdict, rule: Rule, basis_start: str) -> None:
    assert (v.decision, v.rule) == (rule.decision, rule), v.basis
    assert v.basis.startswith(basis_start), v.basis


def ran_past_startup(text: str) -> CycleEvidence:
    """A cycle with no progress report whose log shows it ran past startup (progress unknown)."""
    ev = scan_text(text)
    return replace(ev, progress=replace(ev.progress, ran_past_startup=True))


def test_scheduler_terminated() -> None:
    tl = "slurmstepd: error: *** JOB 7 ON node1 CANCELLED AT 2026-12-02T10:00:01 DUE TO TIME LIMIT ***\n"
    fired(
        job([scan_text(tl)]), Rule.STOP_SCHEDULER_TERMINATED, "The job was ended by the scheduler"
    )


def test_certain_workload_bug() -> None:
    text = "[rank0]:   File \"/work/model.py\", line 88\n[rank0]: SyntaxError: expected ':'\n"
    fired(job([scan_text(text)]), Rule.STOP_CERTAIN_WORKLOAD_BUG, "python_syntax_error is a bug")


def test_user_import_error() -> None:
    text = "".join(
        f'[rank{r}]:   File "/work/mymodel/tools/train.py", line 5, in <module>\n'
        f"[rank{r}]: ModuleNotFoundError: No module named 'mymodel.layers'\n"
        for r in range(2)
    )
    fired(job([scan_text(text)]), Rule.STOP_USER_IMPORT_ERROR, "Import of the user's own code")


def test_invalid_config() -> None:
    text = "[rank0]: train.py: error: unrecognized arguments: --lr-warmup 3\n"
    fired(job([scan_text(text)]), Rule.STOP_INVALID_CONFIG, "Invalid argument/config")


def test_progress() -> None:
    v = job([scan_text(steps(50) + CUDA), scan_text(steps(80) + CUDA)])
    fired(v, Rule.RESTART_PROGRESS, "The job advanced since the previous failures")


def test_desync_recurrence() -> None:
    v = job([scan_text(NCCL_ONLY), scan_text(NCCL_ONLY)])
    fired(v, Rule.STOP_STARTUP_RECURRENCE, "Every rank timed out in the same collective")


def test_unknown_progress_recurrence() -> None:
    v = job([ran_past_startup(KEYERR)] * 2, PolicyConfig(job_no_progress_ceiling=2))
    fired(
        v,
        Rule.STOP_UNKNOWN_PROGRESS_RECURRENCE,
        "Workload bug python_key_error ended 2 consecutive",
    )


def test_progress_unknown() -> None:
    v = job([ran_past_startup(KEYERR)] * 2)
    fired(v, Rule.RESTART_PROGRESS_UNKNOWN, "Progress unknown: the log shows the job ran past")


def test_workload_recurrence_at_startup() -> None:
    v = job([scan_text(KEYERR)] * 2)
    fired(
        v, Rule.STOP_STARTUP_RECURRENCE, "Workload bug python_key_error recurred identically before"
    )


def test_workload_recurrence() -> None:
    v = job([scan_text(steps(50) + KEYERR)] * 2)
    fired(v, Rule.STOP_WORKLOAD_RECURRENCE, "Probable workload bug python_key_error recurred")


def test_startup_deterministic_pair() -> None:
    v = job([scan_text(OOM)] * 2)
    fired(v, Rule.STOP_STARTUP_RECURRENCE, "cuda_oom recurred identically on two consecutive")


def test_same_root_ceiling() -> None:
    v = job([scan_text(steps(50) + CUDA)] * 4)
    fired(v, Rule.STOP_SAME_ROOT_CEILING, "cuda_launch_failure recurred 3 time(s)")


def test_job_no_progress_ceiling() -> None:
    v = job([scan_text("")] * 6)  # six empty logs: no root, failed before any iteration
    fired(v, Rule.STOP_JOB_NO_PROGRESS_CEILING, "5 consecutive restarts without progress")
    assert v.primary is None


def test_no_evidence() -> None:
    fired(job([scan_text(steps(3))]), Rule.RESTART_NO_EVIDENCE, "No failure signature matched")


def test_cascade_only() -> None:
    fired(job([scan_text(NCCL_ONLY)]), Rule.RESTART_CASCADE_ONLY, "Only cascades")


def test_workload_first() -> None:
    fired(
        job([scan_text(KEYERR)]),
        Rule.RESTART_WORKLOAD_FIRST,
        "Probable workload bug python_key_error",
    )


def test_retryable_workload() -> None:
    fired(job([scan_text(OOM)]), Rule.RESTART_RETRYABLE_WORKLOAD, "cuda_oom may not recur")


def test_infrastructure() -> None:
    fired(job([scan_text(CUDA)]), Rule.RESTART_INFRASTRUCTURE, "cuda_launch_failure (infra")


def test_the_table_is_in_the_documented_order() -> None:
    # the order of restart_agent/policy.py's docstring and docs/restart_agent.md's rule table,
    # with the three ways `stop.startup_recurrence` fires where each is tried
    assert [(rule.value, check.__name__) for rule, check in RULES] == [
        ("stop.scheduler_terminated", "_scheduler_terminated"),
        ("stop.certain_workload_bug", "_certain_workload_bug"),
        ("stop.user_import_error", "_user_import_error"),
        ("stop.invalid_config", "_invalid_config"),
        ("restart.progress", "_progress"),
        ("stop.startup_recurrence", "_desync_recurrence"),
        ("stop.unknown_progress_recurrence", "_unknown_progress_recurrence"),
        ("restart.progress_unknown", "_progress_unknown"),
        ("stop.startup_recurrence", "_workload_recurrence_at_startup"),
        ("stop.workload_recurrence", "_workload_recurrence"),
        ("stop.startup_recurrence", "_startup_deterministic_pair"),
        ("stop.same_root_ceiling", "_same_root_ceiling"),
        ("stop.job_no_progress_ceiling", "_job_no_progress_ceiling"),
        ("restart.no_evidence", "_no_evidence"),
        ("restart.cascade_only", "_cascade_only"),
        ("restart.workload_first", "_workload_first"),
        ("restart.retryable_workload", "_retryable_workload"),
        ("restart.infrastructure", "_infrastructure"),
    ]
    # every rule of the deterministic policy is in the table, but the two made after it
    after = {Rule.RESTART_UNHEALTHY_NODE_EXCLUDED, Rule.LLM_GROUNDED_WORKLOAD_BUG}
    assert {rule for rule, _ in RULES} == set(Rule) - after
    # and a test per entry in this file
    names = {n for n in globals() if n.startswith("test_")}
    assert {"test" + check.__name__ for _, check in RULES} <= names
