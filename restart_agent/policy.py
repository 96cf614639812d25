"""The verdict policy: a pure function of one cycle's evidence and the prior cycles.

Rules (ids are stable; docs/restart_agent.md has the table), tried in this order:

STOP
- `stop.scheduler_terminated`   the scheduler or the user ended the job (time limit, scancel)
- `stop.certain_workload_bug`   SyntaxError / IndentationError / TabError
- `stop.user_import_error`      ImportError / ModuleNotFoundError raised from the user's own
                                code, identical on every rank that reported a root
- `stop.invalid_config`         argument/config validation error before any progress in the job
- `stop.workload_recurrence`    probable workload bug, identical (fingerprint and entity) to
                                a prior cycle with known progress and none since
- `stop.same_root_ceiling`      same root recurred without progress `same_root_no_progress_retries` times
- `stop.job_no_progress_ceiling` `job_no_progress_ceiling` consecutive restarts without progress
RESTART
- `restart.progress`            the job advanced since the previous failures: counts reset
- `restart.progress_unknown`    progress unknown in this cycle: counting rules never STOP on it
- `restart.workload_first`      probable workload bug seen for the first time since progress
- `restart.infrastructure`      infrastructure/unknown root within its budgets
- `restart.cascade_only`        only cascades (e.g. NCCL timeouts everywhere), within budgets
- `restart.no_evidence`         nothing matched: default bias is RESTART
- `restart.unhealthy_node_excluded` would have been a ceiling STOP (`stop.workload_recurrence`,
                                `stop.same_root_ceiling`, `stop.job_no_progress_ceiling`), but a
                                node that ran this cycle failed its health check after it and
                                is left out of the next cycle: the recurrence may have been
                                that node, so the job restarts once more without it

Progress between cycles: a cycle has "advanced" when its last iteration (or checkpoint
iteration) is beyond the best of every earlier cycle; "none" when progress was reported
and is not beyond; "unknown" when no progress dialect matched. Unknown progress never
counts toward a STOP ceiling and never resets one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from restart_agent.model import (
    CycleEvidence,
    Evidence,
    NodeHealthNote,
    PolicyConfig,
    PriorCycle,
    Progress,
    Verdict,
)
from restart_agent.scanner import choose_primary

ADVANCED, NONE, UNKNOWN = "advanced", "none", "unknown"
MAX_EVIDENCE = 24
# Ceiling STOPs a failed node-health check turns into one more RESTART: a recurrence can be
# the node's doing. Immediate STOPs (syntax errors, scheduler ends, ...) never are.
HEALTH_OVERRIDABLE_RULES = frozenset(
    {"stop.workload_recurrence", "stop.same_root_ceiling", "stop.job_no_progress_ceiling"}
)


@dataclass(frozen=True)
class _Cycle:
    cycle: int
    fingerprint: str | None
    entity: str | None
    known: bool
    iteration: int | None
    ckpt_iteration: int | None


def _flag(c: _Cycle, best_it: int | None, best_ck: int | None, seen_known: bool) -> str:
    if not c.known or (c.iteration is None and c.ckpt_iteration is None):
        return UNKNOWN
    if not seen_known:
        return ADVANCED
    if c.iteration is not None and (best_it is None or c.iteration > best_it):
        return ADVANCED
    if c.ckpt_iteration is not None and (best_ck is None or c.ckpt_iteration > best_ck):
        return ADVANCED
    return NONE


def _flags(cycles: list[_Cycle]) -> list[str]:
    out = []
    best_it: int | None = None
    best_ck: int | None = None
    seen = False
    for c in cycles:
        out.append(_flag(c, best_it, best_ck, seen))
        if c.known and (c.iteration is not None or c.ckpt_iteration is not None):
            seen = True
            if c.iteration is not None:
                best_it = c.iteration if best_it is None else max(best_it, c.iteration)
            if c.ckpt_iteration is not None:
                best_ck = c.ckpt_iteration if best_ck is None else max(best_ck, c.ckpt_iteration)
    return out


def _same(a: _Cycle, b: _Cycle) -> bool:
    if a.fingerprint is None or a.fingerprint != b.fingerprint:
        return False
    return a.entity is None or b.entity is None or a.entity == b.entity


def _counts(cycles: list[_Cycle], flags: list[str]) -> dict[str, int]:
    """Counts over the window since the last cycle that advanced (the window's anchor)."""
    cur = cycles[-1]
    anchor = 0
    for i in range(len(cycles) - 2, -1, -1):
        if flags[i] == ADVANCED:
            anchor = i
            break
    window = list(range(anchor, len(cycles)))
    same_prior = [
        i for i in window[:-1] if cycles[i].fingerprint == cur.fingerprint and cur.fingerprint
    ]
    identical_prior = [i for i in window[:-1] if _same(cycles[i], cur)]
    # Restarts without progress: cycles after the first of a run whose flag is "none".
    same_run = [
        i for i in window if _same(cycles[i], cur) and (i == window[0] or flags[i] != UNKNOWN)
    ]
    same_retries = sum(1 for i in same_run[1:] if flags[i] == NONE)
    job_retries = sum(1 for i in window[1:] if flags[i] == NONE)
    return {
        "same_root_prior_cycles": len(same_prior),
        "identical_prior_cycles": len(identical_prior),
        "same_root_retries_without_progress": same_retries if flags[-1] == NONE else 0,
        "consecutive_no_progress": job_retries if flags[-1] == NONE else 0,
        "window_start_cycle": cycles[anchor].cycle,
    }


def _primary(evidence: CycleEvidence, fr: Sequence[int] | None) -> tuple[Evidence | None, str]:
    if not fr:
        return evidence.primary, evidence.primary_reason
    return choose_primary(
        evidence.roots, evidence.cascade_evidence, evidence.first_teardown_line, set(fr)
    )


def _user_import_everywhere(primary: Evidence, evidence: CycleEvidence) -> bool:
    if primary.user_frame is None:
        return False
    roots = [e for e in evidence.roots if e.line >= 0]
    return all(e.fingerprint == primary.fingerprint for e in roots)


def decide(
    evidence: CycleEvidence,
    history: Sequence[PriorCycle] = (),
    config: PolicyConfig = PolicyConfig(),  # noqa: B008 - frozen dataclass, safe default
    fr_culprit_ranks: Sequence[int] | None = None,
    node_health: Sequence[NodeHealthNote] = (),
) -> Verdict:
    """STOP or RESTART for the current cycle, with the rule, basis, budgets and counts.

    `node_health`: the launchers' health reports for nodes that failed (or passed) their
    check at the end of this cycle; they are recorded in the verdict, and an unhealthy node
    that ran this cycle turns a ceiling STOP into `restart.unhealthy_node_excluded`.
    """
    primary, reason = _primary(evidence, fr_culprit_ranks)
    prog = evidence.progress
    prior = sorted(history, key=lambda p: p.cycle)
    cur_cycle = (prior[-1].cycle + 1) if prior else 0
    cycles = [
        _Cycle(
            p.cycle,
            p.fingerprint,
            p.entity,
            p.progress_known,
            p.last_iteration,
            p.checkpoint_iteration,
        )
        for p in prior
    ]
    cycles.append(
        _Cycle(
            cur_cycle,
            primary.fingerprint if primary else None,
            primary.entity if primary else None,
            prog.known,
            prog.last_iteration,
            prog.checkpoint_iteration,
        )
    )
    flags = _flags(cycles)
    counts = _counts(cycles, flags)
    flag = flags[-1]
    ever_progress = any(c.known and (c.iteration or c.ckpt_iteration) for c in cycles)
    budgets = {
        "same_root_no_progress_retries": config.same_root_no_progress_retries,
        "same_root_retries_left": max(
            0, config.same_root_no_progress_retries - counts["same_root_retries_without_progress"]
        ),
        "job_no_progress_ceiling": config.job_no_progress_ceiling,
        "job_retries_left": max(
            0, config.job_no_progress_ceiling - counts["consecutive_no_progress"]
        ),
        "workload_recurrence_stop": config.workload_recurrence_stop,
    }
    history_out = {
        **counts,
        "prior_cycles": len(prior),
        "progress_since_prior": flag,
        "best_prior_iteration": max(
            (c.iteration for c in cycles[:-1] if c.known and c.iteration is not None), default=None
        ),
    }
    rec = primary.recoverability if primary else None
    domain = primary.domain if primary else None
    role = primary.role if primary else None
    cls = primary.failure_class if primary else None

    notes = list(node_health)
    unhealthy = [n for n in notes if not n.healthy]
    suspects = [n for n in unhealthy if n.ran_this_cycle]

    def verdict(decision: str, rule: str, basis: str) -> Verdict:
        if unhealthy:
            said = " " + " ".join(_health_sentence(n) for n in unhealthy)
            if decision == "STOP" and rule in HEALTH_OVERRIDABLE_RULES and suspects:
                decision, rule = "RESTART", "restart.unhealthy_node_excluded"
                basis = (
                    f"Would stop ({basis.rstrip('.')}), but node(s) "
                    f"{', '.join(n.node for n in suspects)} that ran this cycle failed "
                    "the health check after it: the recurrence may be that node's, so "
                    f"restart without it.{said}"
                )
            else:
                basis += said
        return _build(
            evidence,
            primary,
            reason,
            decision,
            rule,
            basis,
            history_out,
            budgets,
            fr_culprit_ranks,
            notes,
        )

    # ----------------------------------------------------------------- immediate STOPs
    if primary is not None and role == "root":
        if rec == "terminated":
            return verdict(
                "STOP",
                "stop.scheduler_terminated",
                f"The job was ended by the scheduler or the user ({cls}); restarting inside this allocation cannot help.",
            )
        if rec == "stop":
            return verdict(
                "STOP",
                "stop.certain_workload_bug",
                f"{cls} is a bug in the code that no restart can fix.",
            )
        if rec == "user_import" and _user_import_everywhere(primary, evidence):
            return verdict(
                "STOP",
                "stop.user_import_error",
                f"Import of the user's own code failed ({primary.user_frame}) on every rank that reported; a restart runs the same code.",
            )
        if rec == "config" and not ever_progress:
            return verdict(
                "STOP",
                "stop.invalid_config",
                f"Invalid argument/config ({cls}) before any progress; a restart uses the same arguments.",
            )
    # ----------------------------------------------------------------- progress
    if flag == ADVANCED and prior:
        return verdict(
            "RESTART",
            "restart.progress",
            "The job advanced since the previous failures, so this is not a loop; retry budgets reset.",
        )
    if flag == UNKNOWN and prior:
        return verdict(
            "RESTART",
            "restart.progress_unknown",
            "No progress report was recognised in this cycle; unknown progress never counts toward a STOP.",
        )
    # ----------------------------------------------------------------- ceilings (flag == none or first cycle)
    probable = rec in ("probable", "user_import", "config")
    if primary is not None and role == "root" and probable and domain == "workload":
        identical = counts["identical_prior_cycles"]
        if (
            flag == NONE
            and counts["same_root_retries_without_progress"] >= config.workload_recurrence_stop
        ):
            return verdict(
                "STOP",
                "stop.workload_recurrence",
                f"Probable workload bug {cls} recurred identically without progress ({identical} prior identical cycle(s) since the last progress).",
            )
    if (
        primary is not None
        and flag == NONE
        and counts["same_root_retries_without_progress"] >= config.same_root_no_progress_retries
    ):
        return verdict(
            "STOP",
            "stop.same_root_ceiling",
            f"{cls} recurred {counts['same_root_retries_without_progress']} time(s) after restarts without progress (ceiling {config.same_root_no_progress_retries}).",
        )
    if flag == NONE and counts["consecutive_no_progress"] >= config.job_no_progress_ceiling:
        return verdict(
            "STOP",
            "stop.job_no_progress_ceiling",
            f"{counts['consecutive_no_progress']} consecutive restarts without progress, whatever the cause (ceiling {config.job_no_progress_ceiling}).",
        )
    # ----------------------------------------------------------------- RESTART
    if primary is None:
        return verdict(
            "RESTART",
            "restart.no_evidence",
            "No failure signature matched; the default is to restart.",
        )
    if role != "root":
        return verdict(
            "RESTART",
            "restart.cascade_only",
            f"Only cascades ({cls}) were found, the initiating failure is not in the log; restart within the budgets.",
        )
    if probable and domain == "workload":
        return verdict(
            "RESTART",
            "restart.workload_first",
            f"Probable workload bug {cls}; restart once to see whether it recurs without progress.",
        )
    return verdict(
        "RESTART",
        "restart.infrastructure",
        f"{cls} ({domain}) can heal on restart; {budgets['same_root_retries_left']} same-root retries left.",
    )


def _health_sentence(n: NodeHealthNote) -> str:
    when = "the next cycle" if n.excluded_from_cycle is None else f"cycle {n.excluded_from_cycle}"
    return f"Node {n.node} failed its health check and is left out of {when} ({n.reason or 'no reason given'})."


def _build(
    evidence: CycleEvidence,
    primary: Evidence | None,
    reason: str,
    decision: str,
    rule: str,
    basis: str,
    history: dict[str, object],
    budgets: dict[str, object],
    fr: Sequence[int] | None,
    node_health: list[NodeHealthNote],
) -> Verdict:
    lines: list[Evidence] = []
    if primary is not None:
        lines.append(primary)
    for e in evidence.roots:
        if len(lines) >= MAX_EVIDENCE // 2:
            break
        if e is not primary and e.fingerprint != (primary.fingerprint if primary else None):
            lines.append(e)
    seen_cls = set()
    for e in evidence.cascade_evidence:
        if e.failure_class not in seen_cls and e is not primary:
            seen_cls.add(e.failure_class)
            lines.append(e)
    lines += evidence.diagnostics[: max(0, MAX_EVIDENCE - len(lines))]
    lines = sorted(lines[:MAX_EVIDENCE], key=lambda e: e.line)
    failed = sorted(set(evidence.failed_ranks))
    fan_out = {
        "ranks_seen": len(evidence.ranks_seen),
        "failed_ranks": failed,
        "failed_rank_count": len(failed),
        "primary_rank": primary.rank if primary else None,
        "nodes": list(evidence.nodes),
        "primary_reason": reason,
    }
    return Verdict(
        decision=decision,  # type: ignore[arg-type]
        basis=basis,
        rule=rule,
        primary=primary,
        cascades=list(evidence.cascades),
        progress=evidence.progress,
        history=dict(history),
        budgets=dict(budgets),
        evidence=lines,
        fan_out=fan_out,
        fr={"culprit_ranks": sorted(set(fr))} if fr else None,
        llm={"contributed": False},
        scan={
            "lines": evidence.lines,
            "bytes": evidence.bytes,
            "truncated_last_line": evidence.truncated_last_line,
        },
        node_health=node_health,
    )


def progress_summary(p: Progress) -> str:
    if not p.known:
        return "progress unknown"
    parts = []
    if p.last_iteration is not None:
        parts.append(f"last iteration {p.last_iteration}")
    if p.last_checkpoint:
        parts.append(f"last checkpoint {p.last_checkpoint}")
    return ", ".join(parts) or "progress reported"
