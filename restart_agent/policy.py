"""The verdict policy: a pure function of one cycle's evidence and the prior cycles.

Rules (ids are stable; docs/restart_agent.md has the table), tried in this order:

STOP
- `stop.scheduler_terminated`   the scheduler or the user ended the job (time limit, scancel)
- `stop.certain_workload_bug`   SyntaxError / IndentationError / TabError
- `stop.user_import_error`      ImportError / ModuleNotFoundError raised from the user's own
                                code, identical on every rank that reported a root
- `stop.invalid_config`         argument/config validation error before any progress in the job
- `stop.startup_recurrence`     workload bug (certain or probable) identical (fingerprint and
                                entity) to an earlier cycle, both failing before their first
                                iteration, no progress in between
- `stop.workload_recurrence`    workload bug identical to a prior cycle, progress reported
                                and none since
- `stop.same_root_ceiling`      same root recurred without progress `same_root_no_progress_retries`
                                times (iterations reported, not beyond the best)
- `stop.job_no_progress_ceiling` `job_no_progress_ceiling` consecutive restarts without progress,
                                whatever the roots (startup failures and hangs included)
- `stop.unknown_progress_recurrence` an identical workload root on `job_no_progress_ceiling`
                                consecutive cycles none of which showed progress (this one unknown)
RESTART
- `restart.progress`            the job advanced since the previous failures: counts reset
- `restart.progress_unknown`    progress unknown in this cycle: counting rules never STOP on it
- `restart.workload_first`      workload bug seen for the first time since progress
- `restart.retryable_workload`  workload failure that may not recur (CUDA OOM, NaN loss),
                                within the same-root and job ceilings
- `restart.infrastructure`      infrastructure/unknown root within its budgets
- `restart.cascade_only`        only cascades (e.g. NCCL timeouts everywhere), within budgets
- `restart.no_evidence`         nothing matched: default bias is RESTART
- `restart.unhealthy_node_excluded` would have been a ceiling STOP (`stop.startup_recurrence`,
                                `stop.workload_recurrence`, `stop.same_root_ceiling`,
                                `stop.job_no_progress_ceiling`), but a node that ran this cycle
                                failed its health check after it and is left out of the next
                                cycle: the recurrence may have been that node, so the job
                                restarts once more without it

Progress of a cycle relative to the job (`history.progress_since_prior`, the reason in
`history.progress_basis`):
- "advanced": its last iteration (log dialects or the launcher's `iterations` fact) or
  checkpoint iteration is beyond the best of every earlier cycle;
- "none": iterations reported, not beyond (`reported`); or the cycle failed before its first
  iteration (`launcher_no_iteration`: the launcher saw the progress client and no iteration;
  `no_progress_ever`: no progress report and no cycle of the job ever progressed;
  `startup_window`: no report and the launcher says the cycle lasted at most
  `startup_window_s`; `initial_hang`: the launcher declared a hang before the first
  heartbeat) - a startup failure;
- "unknown": no progress report, and the job progressed before (`job_progressed_before`) or
  the launcher says the cycle ran longer than `startup_window_s` (`long_silent_cycle`: a
  silent long-running job is not a startup loop), or the log shows the job ran past startup
  (`ran_past_startup`: an `activity` dialect, a high collective SeqNum). Unknown never counts
  toward an infrastructure ceiling and never resets one; only an identical workload root
  on `job_no_progress_ceiling` consecutive such cycles stops.
The same-root ceiling counts only reported "none" cycles; startup failures count toward
workload recurrence and the job ceiling.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from relaunch.restart_agent.blame import pick_primary
from relaunch.restart_agent.budget import budget_note
from relaunch.restart_agent.desync import all_rank_timeout
from relaunch.restart_agent.lines import is_user_frame
from relaunch.restart_agent.model import (
    CycleEvidence,
    Decision,
    Evidence,
    NodeHealthNote,
    PolicyConfig,
    PriorCycle,
    Progress,
    Rule,
    Verdict,
)
from relaunch.restart_agent.stragglers import suspect as straggler_suspect
from relaunch.restart_agent.stragglers import verdict_stragglers
from relaunch.restart_agent.taxonomy import taxonomy

ADVANCED, NONE, STARTUP, UNKNOWN = "advanced", "none", "startup", "unknown"
NO_PROGRESS = (NONE, STARTUP)
MAX_EVIDENCE = 24
WORKLOAD_RECOVERABILITY = ("probable", "user_import", "config")
# Ceiling STOPs a failed node-health check turns into one more RESTART: a recurrence can be
# the node's doing. Immediate STOPs (syntax errors, scheduler ends, ...) never are.
HEALTH_OVERRIDABLE_RULES = frozenset(
    {
        Rule.STOP_STARTUP_RECURRENCE,
        Rule.STOP_WORKLOAD_RECURRENCE,
        Rule.STOP_SAME_ROOT_CEILING,
        Rule.STOP_JOB_NO_PROGRESS_CEILING,
        Rule.STOP_UNKNOWN_PROGRESS_RECURRENCE,
    }
)
RANK_SOURCES = {
    "prefix": "its line's rank prefix",
    "message": "the rank named in the message",
    "launcher": "the launcher's facts",
    "elastic_root_cause": "torch elastic's Root Cause (first observed failure)",
    "elastic_failure": "torch elastic's failure summary",
    "elastic_exit": "torch elastic's failed-process line (local rank, single node)",
    "kernel": "a kernel line tied to the rank by its PID",
    "silent_rank": "the only rank that did not time out",
    "straggler": "the launcher's straggler scores: the rank stayed slow before the timeout",
    "mpirun": "Open MPI's mpirun/prterun summary of the process that failed",
    "mpich": "MPICH's mpiexec (hydra/mpd) report of the process that failed",
    "spawn": "torch.multiprocessing.spawn's process index (local rank, single node)",
    "deepspeed": "DeepSpeed's launcher: the --local_rank of the worker it saw exit (single node)",
    "ray_train": "Ray Train's error snippet of the worker that failed (`[Rank N Error Snippet]`)",
}
# a rank that only REPORTED a cascade: named in the verdict, never blamed
REPORTER_SOURCES = ("cascade_reporter",)


@dataclass(frozen=True)
class _Cycle:
    cycle: int
    fingerprint: str | None
    entity: str | None
    known: bool
    iteration: int | None
    ckpt_iteration: int | None
    no_iteration: bool = False
    duration_s: float | None = None
    ran_past_startup: bool = False
    initial_hang: bool = False
    workload: bool = False  # its root is a workload bug (certain or probable)
    desync: str | None = None  # every rank timed out in one collective (desync.py)


def _flags(cycles: list[_Cycle], window_s: float) -> list[tuple[str, str]]:
    """(flag, basis) of every cycle relative to the cycles before it."""
    out: list[tuple[str, str]] = []
    best_it: int | None = None
    best_ck: int | None = None
    seen = False  # some earlier cycle reported iterations
    maybe = False  # ... or ran long without saying (may have progressed)
    for c in cycles:
        measured = c.known and (c.iteration is not None or c.ckpt_iteration is not None)
        if measured:
            beyond = (c.iteration is not None and (best_it is None or c.iteration > best_it)) or (
                c.ckpt_iteration is not None and (best_ck is None or c.ckpt_iteration > best_ck)
            )
            out.append((ADVANCED if not seen or beyond else NONE, "reported"))
            seen = maybe = True
            if c.iteration is not None:
                best_it = c.iteration if best_it is None else max(best_it, c.iteration)
            if c.ckpt_iteration is not None:
                best_ck = c.ckpt_iteration if best_ck is None else max(best_ck, c.ckpt_iteration)
        elif c.no_iteration:
            out.append((STARTUP, "launcher_no_iteration"))
        elif c.initial_hang:
            out.append((STARTUP, "initial_hang"))
        elif c.ran_past_startup:
            out.append((UNKNOWN, "ran_past_startup"))
            maybe = True
        elif c.duration_s is not None and c.duration_s > window_s:
            out.append((UNKNOWN, "long_silent_cycle"))
            maybe = True
        elif not maybe:
            out.append((STARTUP, "no_progress_ever"))
        elif c.duration_s is not None:
            out.append((STARTUP, "startup_window"))
        else:
            out.append((UNKNOWN, "job_progressed_before"))
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
    identical_retries = sum(1 for i in same_run[1:] if flags[i] in NO_PROGRESS)
    job_retries = sum(1 for i in window[1:] if flags[i] in NO_PROGRESS)
    stuck = flags[-1] in NO_PROGRESS
    # Consecutive cycles (this one included) with the same workload root and no progress
    # shown (unknown, none or startup): unknown progress can then still end the job.
    unknown_run = 0
    if flags[-1] == UNKNOWN and cur.workload:
        for i in range(len(cycles) - 1, -1, -1):
            if flags[i] == ADVANCED or not cycles[i].workload or not _same(cycles[i], cur):
                break
            unknown_run += 1
    return {
        "same_root_prior_cycles": len(same_prior),
        "identical_prior_cycles": len(identical_prior),
        "same_root_retries_without_progress": same_retries if flags[-1] == NONE else 0,
        "identical_retries_without_progress": identical_retries if stuck else 0,
        "consecutive_no_progress": job_retries if stuck else 0,
        "window_start_cycle": cycles[anchor].cycle,
        "identical_cycles_progress_unknown": unknown_run,
    }


_FRAME_PATH = re.compile(r'File "([^"]+)"')
_MODULE = re.compile(r"No module named '([\w.]+)'|cannot import name '\w+' from '([\w.]+)'")
_MESSAGE_PATH = re.compile(r"\(([^()]*[/\\][^()]*)\)\s*$")


def _norm(part: str) -> str:
    return part.lower().replace("-", "_")


def _own_module(primary: Evidence) -> bool:
    """The import failed in the user's code for a module of the user's own package.

    The innermost frame is user code, and the missing module's top-level name is part of
    a user path (a frame of the traceback, or the path the message names): a third-party
    package missing from the environment (`deepspeed`, `flash_attn`) is not the user's.
    """
    mm = _MODULE.search(primary.text)
    module = (mm.group(1) or mm.group(2)).split(".")[0] if mm else ""
    if len(module) < 3 or not module.isidentifier():
        return False
    frames = [m.group(1) for c in primary.context if (m := _FRAME_PATH.search(str(c["text"])))]
    if frames and not is_user_frame(frames[-1]):
        return False  # raised inside an installed library
    if module in taxonomy().own_module_names:
        return True  # a project's own folder name (taxonomy.yaml own_module_names)
    if not frames:
        return False
    paths = [f for f in frames if is_user_frame(f)]
    m = _MESSAGE_PATH.search(primary.text)
    if m and is_user_frame(m.group(1)):
        paths.append(m.group(1))
    want = _norm(module)
    return any(
        want in _norm(part) for path in paths for part in re.split(r"[/\\]", path)[:-1]
    ) or any(_norm(re.split(r"[/\\]", path)[-1]).split(".")[0] == want for path in paths)


def _world(evidence: CycleEvidence) -> int | None:
    """World size: the launcher's, else one past the highest rank seen (None: no ranks)."""
    facts = evidence.launcher
    if facts is not None and facts.world_size:
        return facts.world_size
    return max(evidence.ranks_seen) + 1 if evidence.ranks_seen else None


def _user_import_everywhere(primary: Evidence, evidence: CycleEvidence) -> bool:
    """The user's own module failed to import, identically on every rank of the world."""
    if not _own_module(primary):
        return False
    roots = [e for e in evidence.roots if e.line >= 0]
    if not all(e.fingerprint == primary.fingerprint for e in roots):
        return False
    world = _world(evidence)
    if world is None:
        return True  # a single process without rank prefixes
    ranks = {e.rank for e in roots if e.rank is not None and 0 <= e.rank < world}
    return len(ranks) == world


def effective_progress(evidence: CycleEvidence) -> Progress:
    """The cycle's progress with the launcher's facts folded in (iterations, duration)."""
    prog = evidence.progress
    facts = evidence.launcher
    if facts is None or facts.duration_s is None:
        # no duration from the launcher: the span of the log's own timestamps
        span = prog.log_span_s
        if span is not None:
            prog = replace(prog, duration_s=span, duration_source="log_timestamps")
    if facts is None:
        return replace(prog, source="dialect") if prog.known else prog
    source = "dialect" if prog.known else None
    last, first = prog.last_iteration, prog.first_iteration
    known = prog.known
    if facts.iterations:
        top = max(facts.iterations.values())
        low = min(facts.iterations.values())
        if last is None or top > last:
            last, source, known = top, "launcher", True
        first = low if first is None else min(first, low)
    no_iteration = bool(facts.client) and not facts.iterations and last is None
    initial_hang = last is None and any(bool(h.get("initial")) for h in facts.hangs)
    return replace(
        prog,
        known=known,
        last_iteration=last,
        first_iteration=first,
        source=source,
        no_iteration=no_iteration,
        duration_s=facts.duration_s if facts.duration_s is not None else prog.duration_s,
        duration_source="launcher" if facts.duration_s is not None else prog.duration_source,
        initial_hang=initial_hang,
        checkpoint=facts.checkpoint if facts.checkpoint is not None else prog.checkpoint,
    )


def _blame_sentence(primary: Evidence | None) -> str:
    if primary is None or primary.rank is None:
        return ""
    if primary.rank_source in REPORTER_SOURCES:
        return (
            f" Rank {primary.rank} reported the cascade (a reporter, not the culprit);"
            " no rank is blamed."
        )
    how = RANK_SOURCES.get(primary.rank_source or "", primary.rank_source or "the log")
    return f" Blamed rank {primary.rank} (from {how})."


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
    primary, reason = pick_primary(evidence, fr_culprit_ranks)
    slow = straggler_suspect(  # who is blamed, never the decision
        primary, evidence.launcher, {c.failure_class for c in evidence.cascades}
    )
    if slow is not None:
        primary, reason = slow, f"{reason}; rank {slow.rank} was a persistent straggler before it"
    prog = effective_progress(evidence)
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
            p.no_iteration,
            p.duration_s,
            p.ran_past_startup,
            p.initial_hang,
            p.domain == "workload" and p.recoverability in WORKLOAD_RECOVERABILITY + ("stop",),
            p.all_rank_timeout,
        )
        for p in prior
    ]
    desync = all_rank_timeout(evidence) if primary is not None and primary.role != "root" else None
    cycles.append(
        _Cycle(
            cur_cycle,
            primary.fingerprint if primary else None,
            primary.entity if primary else None,
            prog.known,
            prog.last_iteration,
            prog.checkpoint_iteration,
            prog.no_iteration,
            prog.duration_s,
            prog.ran_past_startup,
            prog.initial_hang,
            primary is not None
            and primary.role == "root"
            and primary.domain == "workload"
            and primary.recoverability in WORKLOAD_RECOVERABILITY + ("stop",),
            desync,
        )
    )
    flagged = _flags(cycles, config.startup_window_s)
    flags = [f for f, _ in flagged]
    counts = _counts(cycles, flags)
    flag, progress_basis = flagged[-1]
    ever_progress = any(
        c.known and (c.iteration is not None or c.ckpt_iteration is not None) for c in cycles
    )
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
        "workload_recurrences_left": max(
            0, config.workload_recurrence_stop - counts["identical_retries_without_progress"]
        ),
        "startup_window_s": config.startup_window_s,
    }
    history_out = {
        **counts,
        "prior_cycles": len(prior),
        "progress_since_prior": NONE if flag == STARTUP else flag,
        "progress_basis": progress_basis,
        "failed_before_first_iteration": flag == STARTUP,
        "job_ever_progressed": ever_progress,
        "best_prior_iteration": max(
            (c.iteration for c in cycles[:-1] if c.known and c.iteration is not None), default=None
        ),
    }
    rec = primary.recoverability if primary else None
    domain = primary.domain if primary else None
    role = primary.role if primary else None
    cls = primary.failure_class if primary else None
    blamed = _blame_sentence(primary)

    notes = list(node_health)
    unhealthy = [n for n in notes if not n.healthy]
    suspects = [n for n in unhealthy if n.ran_this_cycle]

    def verdict(decision: Decision, rule: Rule, basis: str) -> Verdict:
        if unhealthy:
            said = " " + " ".join(_health_sentence(n) for n in unhealthy)
            if decision == Decision.STOP and rule in HEALTH_OVERRIDABLE_RULES and suspects:
                decision, rule = Decision.RESTART, Rule.RESTART_UNHEALTHY_NODE_EXCLUDED
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
            basis + blamed,
            history_out,
            budgets,
            fr_culprit_ranks,
            notes,
            prog,
            desync,
        )

    # ----------------------------------------------------------------- immediate STOPs
    if primary is not None and role == "root":
        if rec == "terminated":
            return verdict(
                Decision.STOP,
                Rule.STOP_SCHEDULER_TERMINATED,
                f"The job was ended by the scheduler or the user ({cls}); restarting inside this allocation cannot help.",
            )
        if rec == "stop":
            return verdict(
                Decision.STOP,
                Rule.STOP_CERTAIN_WORKLOAD_BUG,
                f"{cls} is a bug in the code that no restart can fix.",
            )
        if rec == "user_import" and _user_import_everywhere(primary, evidence):
            return verdict(
                Decision.STOP,
                Rule.STOP_USER_IMPORT_ERROR,
                f"Import of the user's own code failed ({primary.user_frame}) on every rank that reported; a restart runs the same code.",
            )
        if rec == "config" and not ever_progress:
            return verdict(
                Decision.STOP,
                Rule.STOP_INVALID_CONFIG,
                f"Invalid argument/config ({cls}) before any progress; a restart uses the same arguments.",
            )
    # ----------------------------------------------------------------- progress
    if flag == ADVANCED and prior:
        return verdict(
            Decision.RESTART,
            Rule.RESTART_PROGRESS,
            "The job advanced since the previous failures, so this is not a loop; retry budgets reset.",
        )
    # an all-rank timeout in one collective, twice in a row, in a job that never progressed
    # (a collective timeout takes its timeout to come, so the cycle may be a long one; a
    # log that shows the job ran past startup is no desync at startup)
    if (
        desync is not None
        and len(cycles) >= 2
        and cycles[-2].desync == desync
        and not ever_progress
        and not any(c.ran_past_startup for c in cycles)
        and not unhealthy
    ):
        return verdict(
            Decision.STOP,
            Rule.STOP_STARTUP_RECURRENCE,
            f"Every rank timed out in the same collective ({desync}: op@sequence number/ranks) on two consecutive cycles and the job never progressed: the ranks disagree about the collectives they run (a mismatched or missing collective), a workload desync loop; no node or link fault was seen.",
        )
    run = counts["identical_cycles_progress_unknown"]
    if flag == UNKNOWN and prior and run >= config.job_no_progress_ceiling:
        return verdict(
            Decision.STOP,
            Rule.STOP_UNKNOWN_PROGRESS_RECURRENCE,
            f"Workload bug {cls} ended {run} consecutive cycles identically with no progress shown (progress unknown: {progress_basis}; stop at {config.job_no_progress_ceiling}, job_no_progress_ceiling).",
        )
    if flag == UNKNOWN and prior:
        said_by = (
            "the span of the log's own timestamps"
            if prog.duration_source == "log_timestamps"
            else "the launcher"
        )
        why = (
            f"{said_by} says the cycle ran {prog.duration_s:g} s (beyond the {config.startup_window_s:g} s startup window) without a progress report"
            if progress_basis == "long_silent_cycle"
            else "the log shows the job ran past startup (a collective sequence number) but has no progress report"
            if progress_basis == "ran_past_startup"
            else "the job progressed before and this cycle's log has no progress report"
        )
        return verdict(
            Decision.RESTART,
            Rule.RESTART_PROGRESS_UNKNOWN,
            f"Progress unknown: {why}; unknown progress counts toward no infrastructure ceiling ({run} identical workload cycle(s) without progress shown, stop at {config.job_no_progress_ceiling}).",
        )
    # ----------------------------------------------------------------- ceilings (no progress, or first cycle)
    workload = (
        primary is not None
        and role == "root"
        and domain == "workload"
        and rec in WORKLOAD_RECOVERABILITY
    )
    retries = counts["identical_retries_without_progress"]
    if workload and flag in NO_PROGRESS and retries >= config.workload_recurrence_stop:
        identical = counts["identical_prior_cycles"]
        if flag == STARTUP:
            return verdict(
                Decision.STOP,
                Rule.STOP_STARTUP_RECURRENCE,
                f"Workload bug {cls} recurred identically before the first iteration ({identical} prior identical cycle(s) without progress, stop after {config.workload_recurrence_stop}; progress: {progress_basis}).",
            )
        return verdict(
            Decision.STOP,
            Rule.STOP_WORKLOAD_RECURRENCE,
            f"Probable workload bug {cls} recurred identically without progress ({identical} prior identical cycle(s) since the last progress).",
        )
    # both this cycle and the one before it failed before their first iteration, identically
    startup_pair = (
        len(cycles) >= 2
        and flag == STARTUP
        and flags[-2] == STARTUP
        and _same(cycles[-2], cycles[-1])
    )
    if (
        startup_pair
        and role == "root"
        and cls in taxonomy().startup_deterministic
        and config.workload_recurrence_stop <= 1
    ):
        return verdict(
            Decision.STOP,
            Rule.STOP_STARTUP_RECURRENCE,
            f"{cls} recurred identically on two consecutive cycles that both failed before their first iteration: it does not depend on the state a run reaches, so it recurs on every restart (after progress it would stay retryable).",
        )
    if (
        primary is not None
        and flag == NONE
        and counts["same_root_retries_without_progress"] >= config.same_root_no_progress_retries
    ):
        return verdict(
            Decision.STOP,
            Rule.STOP_SAME_ROOT_CEILING,
            f"{cls} recurred {counts['same_root_retries_without_progress']} time(s) after restarts without progress (ceiling {config.same_root_no_progress_retries}).",
        )
    if flag in NO_PROGRESS and counts["consecutive_no_progress"] >= config.job_no_progress_ceiling:
        start = " (startup failures included)" if flag == STARTUP else ""
        return verdict(
            Decision.STOP,
            Rule.STOP_JOB_NO_PROGRESS_CEILING,
            f"{counts['consecutive_no_progress']} consecutive restarts without progress{start}, whatever the cause (ceiling {config.job_no_progress_ceiling}).",
        )
    # ----------------------------------------------------------------- RESTART
    left = f" {budgets['job_retries_left']} restart(s) without progress left in the job."
    if primary is None:
        return verdict(
            Decision.RESTART,
            Rule.RESTART_NO_EVIDENCE,
            "No failure signature matched; the default is to restart." + left,
        )
    if role != "root":
        if primary.rank_source == "silent_rank":
            basis = (
                f"Every rank but rank {primary.rank} reported {cls}: the silent rank is the "
                "suspect, its own failure is not in the log; restart within the budgets."
            )
        else:
            basis = f"Only cascades ({cls}) were found, the initiating failure is not in the log; restart within the budgets."
        return verdict(Decision.RESTART, Rule.RESTART_CASCADE_ONLY, basis + left)
    if workload:
        kind = "Probable workload bug" if rec == "probable" else "Workload bug"
        return verdict(
            Decision.RESTART,
            Rule.RESTART_WORKLOAD_FIRST,
            f"{kind} {cls}; restart once to see whether it recurs without progress ({budgets['workload_recurrences_left']} identical recurrence(s) without progress left).",
        )
    if domain == "workload" and rec == "retry":
        return verdict(
            Decision.RESTART,
            Rule.RESTART_RETRYABLE_WORKLOAD,
            f"{cls} may not recur on a restart (retryable within the budgets); {budgets['same_root_retries_left']} same-root retries left, {budgets['job_retries_left']} restart(s) without progress left in the job.",
        )
    return verdict(
        Decision.RESTART,
        Rule.RESTART_INFRASTRUCTURE,
        f"{cls} ({domain}) can heal on restart; {budgets['same_root_retries_left']} same-root retries left, {budgets['job_retries_left']} restart(s) without progress left in the job.",
    )


def _health_sentence(n: NodeHealthNote) -> str:
    when = "the next cycle" if n.excluded_from_cycle is None else f"cycle {n.excluded_from_cycle}"
    return f"Node {n.node} failed its health check and is left out of {when} ({n.reason or 'no reason given'})."


def _build(
    evidence: CycleEvidence,
    primary: Evidence | None,
    reason: str,
    decision: Decision,
    rule: Rule,
    basis: str,
    history: Mapping[str, object],
    budgets: Mapping[str, object],
    fr: Sequence[int] | None,
    node_health: list[NodeHealthNote],
    progress: Progress,
    desync: str | None = None,
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
        "rank_source": primary.rank_source if primary else None,
        "all_rank_timeout": desync,
    }
    facts = evidence.launcher
    if facts is not None:
        fan_out["launcher"] = {
            "facts": facts.facts,
            "first_failing_rank": facts.first_failing_rank,
            "exits": [
                {"rank": e.rank, "exitcode": e.exitcode, "signal": e.signal, "first": e.first}
                for e in facts.exits[:64]
            ],
            "hangs": [
                {k: h.get(k) for k in ("rank", "section", "initial")} for h in facts.hangs[:16]
            ],
            "iterations_max": max(facts.iterations.values(), default=None),
            "silent_ranks": facts.silent_ranks[:64],
            "client": facts.client,
            "duration_s": facts.duration_s,
            "node_health": facts.node_health[:64],
        }
    return Verdict(
        decision=decision,
        basis=basis + budget_note(evidence.budget),  # the scan stopped at its budget
        rule=rule,
        primary=primary,
        cascades=list(evidence.cascades),
        progress=progress,
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
            **({"budget": evidence.budget} if evidence.budget else {}),
        },
        node_health=node_health,
        stragglers=verdict_stragglers(
            facts, primary.rank if primary and primary.rank_source == "straggler" else None
        ),
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
