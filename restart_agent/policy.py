"""The verdict policy: a pure function of one cycle's evidence and the prior cycles.

Rules (ids are stable; docs/restart_agent.md has the table). `RULES` holds one
(rule, check) entry per way a rule fires, in the order they are tried (the first that
fires decides); `stop.startup_recurrence` has three entries (an all-rank collective
timeout twice, a workload recurrence at startup, a startup-deterministic class twice):

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace

from relaunch.restart_agent.blame import pick_primary
from relaunch.restart_agent.budget import budget_note
from relaunch.restart_agent.desync import all_rank_timeout
from relaunch.restart_agent.lines import is_user_frame
from relaunch.restart_agent.model import (
    Budgets,
    CycleEvidence,
    Decision,
    Evidence,
    FanOut,
    FRFindings,
    History,
    NodeHealthNote,
    PolicyConfig,
    PriorCycle,
    Progress,
    Rule,
    ScanInfo,
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
    "flight_recorder": "the Flight Recorder dumps: the others waited in a collective it never entered",
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
    "paddle": "Paddle's launcher: the `Container rank N` that failed (local rank, single node)",
    "paddle_trainer": "Paddle's launch_utils: the trainer `rank=[N]` it saw aborted",
    "horovod": "Horovod's runner: the process index it saw exit (`Process N exit with status code C.`)",
}
# a rank that only REPORTED a cascade: named in the verdict, never blamed
REPORTER_SOURCES = ("cascade_reporter",)


def _is_workload(domain: str | None, recoverability: str | None) -> bool:
    """A root's domain and recoverability say it is a workload bug (certain or probable)."""
    return domain == "workload" and recoverability in WORKLOAD_RECOVERABILITY + ("stop",)


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

    @classmethod
    def from_prior(cls, p: PriorCycle) -> _Cycle:
        """An earlier cycle, from what the job's history stored of it."""
        return cls(
            cycle=p.cycle,
            fingerprint=p.fingerprint,
            entity=p.entity,
            known=p.progress_known,
            iteration=p.last_iteration,
            ckpt_iteration=p.checkpoint_iteration,
            no_iteration=p.no_iteration,
            duration_s=p.duration_s,
            ran_past_startup=p.ran_past_startup,
            initial_hang=p.initial_hang,
            workload=_is_workload(p.domain, p.recoverability),
            desync=p.all_rank_timeout,
        )

    @classmethod
    def current(
        cls, cycle: int, primary: Evidence | None, prog: Progress, desync: str | None
    ) -> _Cycle:
        """The cycle being decided, from its primary failure and effective progress."""
        return cls(
            cycle=cycle,
            fingerprint=primary.fingerprint if primary else None,
            entity=primary.entity if primary else None,
            known=prog.known,
            iteration=prog.last_iteration,
            ckpt_iteration=prog.checkpoint_iteration,
            no_iteration=prog.no_iteration,
            duration_s=prog.duration_s,
            ran_past_startup=prog.ran_past_startup,
            initial_hang=prog.initial_hang,
            workload=primary is not None
            and primary.role == "root"
            and _is_workload(primary.domain, primary.recoverability),
            desync=desync,
        )


@dataclass(frozen=True)
class Counts:
    """Counts over the window since the last cycle that advanced (`Verdict.history`'s head)."""

    same_root_prior_cycles: int
    identical_prior_cycles: int
    same_root_retries_without_progress: int
    identical_retries_without_progress: int
    consecutive_no_progress: int
    window_start_cycle: int
    identical_cycles_progress_unknown: int

    def to_dict(self) -> dict[str, int]:
        """The stored form: these keys, in this order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _flags(cycles: Sequence[_Cycle], window_s: float) -> list[tuple[str, str]]:
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


def _counts(cycles: Sequence[_Cycle], flags: Sequence[str]) -> Counts:
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
    return Counts(
        same_root_prior_cycles=len(same_prior),
        identical_prior_cycles=len(identical_prior),
        same_root_retries_without_progress=same_retries if flags[-1] == NONE else 0,
        identical_retries_without_progress=identical_retries if stuck else 0,
        consecutive_no_progress=job_retries if stuck else 0,
        window_start_cycle=cycles[anchor].cycle,
        identical_cycles_progress_unknown=unknown_run,
    )


_FRAME_PATH = re.compile(r'File "([^"]+)"')
_RELATIVE_IMPORT = re.compile(
    r"attempted relative import (?:with no known parent package|beyond top-level package)"
)
_MODULE = re.compile(r"No module named '([\w.]+)'|cannot import name '\w+' from '([\w.]+)'")
_MESSAGE_PATH = re.compile(r"\(([^()]*[/\\][^()]*)\)\s*$")


def _norm(part: str) -> str:
    return part.lower().replace("-", "_")


def _own_module(primary: Evidence) -> bool:
    """The import failed in the user's code for a module of the user's own package.

    The innermost frame is user code, and the missing module's top-level name is part of
    a user path (a frame of the traceback, or the path the message names): a third-party
    package missing from the environment (`deepspeed`, `flash_attn`) is not the user's.
    A relative import (`attempted relative import with no known parent package`, `beyond
    top-level package`) is always the user's own package's, when raised in user code.
    """
    if _RELATIVE_IMPORT.search(primary.text):
        rel = [m.group(1) for c in primary.context if (m := _FRAME_PATH.search(str(c["text"])))]
        return not rel or is_user_frame(rel[-1])
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


@dataclass(frozen=True)
class _Ctx:
    """What the rules read: one cycle's primary failure, its progress and the job's counts."""

    evidence: CycleEvidence
    primary: Evidence | None
    prog: Progress  # the cycle's effective progress (launcher facts folded in)
    config: PolicyConfig
    cycles: tuple[_Cycle, ...]  # the prior cycles and this one, last
    flags: tuple[str, ...]  # each cycle's progress flag (ADVANCED, NONE, STARTUP, UNKNOWN)
    progress_basis: str  # why this cycle got its flag
    counts: Counts
    budgets: Budgets
    ever_progress: bool  # some cycle of the job reported progress
    desync: str | None  # every rank timed out in one collective (desync.py)
    unhealthy: bool  # a node failed its health check after this cycle

    @property
    def flag(self) -> str:
        return self.flags[-1]

    @property
    def has_prior(self) -> bool:
        return len(self.cycles) > 1

    @property
    def cls(self) -> str | None:
        return self.primary.failure_class if self.primary else None

    @property
    def rec(self) -> str | None:
        return self.primary.recoverability if self.primary else None

    @property
    def root(self) -> bool:
        return self.primary is not None and self.primary.role == "root"

    @property
    def workload(self) -> bool:
        """The root is a workload bug a recurrence can prove (probable, user import, config)."""
        return (
            self.root
            and self.primary is not None
            and self.primary.domain == "workload"
            and self.rec in WORKLOAD_RECOVERABILITY
        )


# A rule's check: its basis when it fires on the context, else None.
Check = Callable[[_Ctx], str | None]


# ----------------------------------------------------------------- immediate STOPs
def _scheduler_terminated(c: _Ctx) -> str | None:
    if not (c.root and c.rec == "terminated"):
        return None
    return f"The job was ended by the scheduler or the user ({c.cls}); restarting inside this allocation cannot help."


def _certain_workload_bug(c: _Ctx) -> str | None:
    if not (c.root and c.rec == "stop"):
        return None
    return f"{c.cls} is a bug in the code that no restart can fix."


def _user_import_error(c: _Ctx) -> str | None:
    p = c.primary
    if p is None or not c.root or c.rec != "user_import":
        return None
    if not _user_import_everywhere(p, c.evidence):
        return None
    return f"Import of the user's own code failed ({p.user_frame}) on every rank that reported; a restart runs the same code."


def _invalid_config(c: _Ctx) -> str | None:
    if not (c.root and c.rec == "config" and not c.ever_progress):
        return None
    return (
        f"Invalid argument/config ({c.cls}) before any progress; a restart uses the same arguments."
    )


# ----------------------------------------------------------------- progress
def _progress(c: _Ctx) -> str | None:
    if not (c.flag == ADVANCED and c.has_prior):
        return None
    return (
        "The job advanced since the previous failures, so this is not a loop; retry budgets reset."
    )


def _desync_recurrence(c: _Ctx) -> str | None:
    """An all-rank timeout in one collective, twice in a row, in a job that never progressed.

    A collective timeout takes its timeout to come, so the cycle may be a long one; a log
    that shows the job ran past startup is no desync at startup.
    """
    if (
        c.desync is None
        or len(c.cycles) < 2
        or c.cycles[-2].desync != c.desync
        or c.ever_progress
        or any(x.ran_past_startup for x in c.cycles)
        or c.unhealthy
    ):
        return None
    return f"Every rank timed out in the same collective ({c.desync}: op@sequence number/ranks) on two consecutive cycles and the job never progressed: the ranks disagree about the collectives they run (a mismatched or missing collective), a workload desync loop; no node or link fault was seen."


def _unknown_progress_recurrence(c: _Ctx) -> str | None:
    run = c.counts.identical_cycles_progress_unknown
    if not (c.flag == UNKNOWN and c.has_prior and run >= c.config.job_no_progress_ceiling):
        return None
    return f"Workload bug {c.cls} ended {run} consecutive cycles identically with no progress shown (progress unknown: {c.progress_basis}; stop at {c.config.job_no_progress_ceiling}, job_no_progress_ceiling)."


def _progress_unknown(c: _Ctx) -> str | None:
    if not (c.flag == UNKNOWN and c.has_prior):
        return None
    said_by = (
        "the span of the log's own timestamps"
        if c.prog.duration_source == "log_timestamps"
        else "the launcher"
    )
    why = (
        f"{said_by} says the cycle ran {c.prog.duration_s:g} s (beyond the {c.config.startup_window_s:g} s startup window) without a progress report"
        if c.progress_basis == "long_silent_cycle"
        else "the log shows the job ran past startup (a collective sequence number) but has no progress report"
        if c.progress_basis == "ran_past_startup"
        else "the job progressed before and this cycle's log has no progress report"
    )
    run = c.counts.identical_cycles_progress_unknown
    return f"Progress unknown: {why}; unknown progress counts toward no infrastructure ceiling ({run} identical workload cycle(s) without progress shown, stop at {c.config.job_no_progress_ceiling})."


# ----------------------------------------------------------------- ceilings (no progress, or first cycle)
def _workload_recurs(c: _Ctx) -> bool:
    retries = c.counts.identical_retries_without_progress
    return c.workload and retries >= c.config.workload_recurrence_stop


def _workload_recurrence_at_startup(c: _Ctx) -> str | None:
    if not (c.flag == STARTUP and _workload_recurs(c)):
        return None
    return f"Workload bug {c.cls} recurred identically before the first iteration ({c.counts.identical_prior_cycles} prior identical cycle(s) without progress, stop after {c.config.workload_recurrence_stop}; progress: {c.progress_basis})."


def _workload_recurrence(c: _Ctx) -> str | None:
    if not (c.flag == NONE and _workload_recurs(c)):
        return None
    return f"Probable workload bug {c.cls} recurred identically without progress ({c.counts.identical_prior_cycles} prior identical cycle(s) since the last progress)."


def _startup_deterministic_pair(c: _Ctx) -> str | None:
    """This cycle and the one before it failed identically before their first iteration."""
    if not (
        len(c.cycles) >= 2
        and c.flag == STARTUP
        and c.flags[-2] == STARTUP
        and _same(c.cycles[-2], c.cycles[-1])
        and c.root
        and c.cls in taxonomy().startup_deterministic
        and c.config.workload_recurrence_stop <= 1
    ):
        return None
    return f"{c.cls} recurred identically on two consecutive cycles that both failed before their first iteration: it does not depend on the state a run reaches, so it recurs on every restart (after progress it would stay retryable)."


def _same_root_ceiling(c: _Ctx) -> str | None:
    n = c.counts.same_root_retries_without_progress
    if not (
        c.primary is not None and c.flag == NONE and n >= c.config.same_root_no_progress_retries
    ):
        return None
    return f"{c.cls} recurred {n} time(s) after restarts without progress (ceiling {c.config.same_root_no_progress_retries})."


def _job_no_progress_ceiling(c: _Ctx) -> str | None:
    n = c.counts.consecutive_no_progress
    if not (c.flag in NO_PROGRESS and n >= c.config.job_no_progress_ceiling):
        return None
    start = " (startup failures included)" if c.flag == STARTUP else ""
    return f"{n} consecutive restarts without progress{start}, whatever the cause (ceiling {c.config.job_no_progress_ceiling})."


# ----------------------------------------------------------------- RESTART within the budgets
def _left(c: _Ctx) -> str:
    return f" {c.budgets.job_retries_left} restart(s) without progress left in the job."


def _no_evidence(c: _Ctx) -> str | None:
    if c.primary is not None:
        return None
    return "No failure signature matched; the default is to restart." + _left(c)


def _cascade_only(c: _Ctx) -> str | None:
    p = c.primary
    if p is None or c.root:
        return None
    if p.rank_source == "silent_rank":
        basis = (
            f"Every rank but rank {p.rank} reported {c.cls}: the silent rank is the "
            "suspect, its own failure is not in the log; restart within the budgets."
        )
    else:
        basis = f"Only cascades ({c.cls}) were found, the initiating failure is not in the log; restart within the budgets."
    return basis + _left(c)


def _workload_first(c: _Ctx) -> str | None:
    if not c.workload:
        return None
    kind = "Probable workload bug" if c.rec == "probable" else "Workload bug"
    return f"{kind} {c.cls}; restart once to see whether it recurs without progress ({c.budgets.workload_recurrences_left} identical recurrence(s) without progress left)."


def _retryable_workload(c: _Ctx) -> str | None:
    p = c.primary
    if p is None or not c.root or p.domain != "workload" or c.rec != "retry":
        return None
    return f"{c.cls} may not recur on a restart (retryable within the budgets); {c.budgets.same_root_retries_left} same-root retries left, {c.budgets.job_retries_left} restart(s) without progress left in the job."


def _infrastructure(c: _Ctx) -> str | None:
    domain = c.primary.domain if c.primary else None
    return f"{c.cls} ({domain}) can heal on restart; {c.budgets.same_root_retries_left} same-root retries left, {c.budgets.job_retries_left} restart(s) without progress left in the job."


# The policy, in the order it is tried: the first entry whose check fires decides (its
# rule's id prefix is the decision). `_infrastructure` always fires. A failed node-health
# check may then turn a ceiling STOP into `restart.unhealthy_node_excluded` (`_health_override`).
RULES: tuple[tuple[Rule, Check], ...] = (
    (Rule.STOP_SCHEDULER_TERMINATED, _scheduler_terminated),
    (Rule.STOP_CERTAIN_WORKLOAD_BUG, _certain_workload_bug),
    (Rule.STOP_USER_IMPORT_ERROR, _user_import_error),
    (Rule.STOP_INVALID_CONFIG, _invalid_config),
    (Rule.RESTART_PROGRESS, _progress),
    (Rule.STOP_STARTUP_RECURRENCE, _desync_recurrence),
    (Rule.STOP_UNKNOWN_PROGRESS_RECURRENCE, _unknown_progress_recurrence),
    (Rule.RESTART_PROGRESS_UNKNOWN, _progress_unknown),
    (Rule.STOP_STARTUP_RECURRENCE, _workload_recurrence_at_startup),
    (Rule.STOP_WORKLOAD_RECURRENCE, _workload_recurrence),
    (Rule.STOP_STARTUP_RECURRENCE, _startup_deterministic_pair),
    (Rule.STOP_SAME_ROOT_CEILING, _same_root_ceiling),
    (Rule.STOP_JOB_NO_PROGRESS_CEILING, _job_no_progress_ceiling),
    (Rule.RESTART_NO_EVIDENCE, _no_evidence),
    (Rule.RESTART_CASCADE_ONLY, _cascade_only),
    (Rule.RESTART_WORKLOAD_FIRST, _workload_first),
    (Rule.RESTART_RETRYABLE_WORKLOAD, _retryable_workload),
    (Rule.RESTART_INFRASTRUCTURE, _infrastructure),
)


def _first_rule(ctx: _Ctx) -> tuple[Rule, str]:
    """The first entry of `RULES` that fires, and its basis."""
    for rule, check in RULES:
        basis = check(ctx)
        if basis is not None:
            return rule, basis
    raise AssertionError("the last rule of RULES always fires")


def _health_override(
    decision: Decision, rule: Rule, basis: str, unhealthy: Sequence[NodeHealthNote]
) -> tuple[Decision, Rule, str]:
    """An unhealthy node is said in the basis; one that ran this cycle turns a ceiling STOP."""
    if not unhealthy:
        return decision, rule, basis
    said = " " + " ".join(_health_sentence(n) for n in unhealthy)
    suspects = [n for n in unhealthy if n.ran_this_cycle]
    if decision == Decision.STOP and rule in HEALTH_OVERRIDABLE_RULES and suspects:
        return (
            Decision.RESTART,
            Rule.RESTART_UNHEALTHY_NODE_EXCLUDED,
            f"Would stop ({basis.rstrip('.')}), but node(s) "
            f"{', '.join(n.node for n in suspects)} that ran this cycle failed "
            "the health check after it: the recurrence may be that node's, so "
            f"restart without it.{said}",
        )
    return decision, rule, basis + said


def _history(ctx: _Ctx) -> History:
    """`Verdict.history`: the counts, then this cycle's progress relative to the job."""
    flag, counts = ctx.flag, ctx.counts
    return History(
        same_root_prior_cycles=counts.same_root_prior_cycles,
        identical_prior_cycles=counts.identical_prior_cycles,
        same_root_retries_without_progress=counts.same_root_retries_without_progress,
        identical_retries_without_progress=counts.identical_retries_without_progress,
        consecutive_no_progress=counts.consecutive_no_progress,
        window_start_cycle=counts.window_start_cycle,
        identical_cycles_progress_unknown=counts.identical_cycles_progress_unknown,
        prior_cycles=len(ctx.cycles) - 1,
        progress_since_prior=NONE if flag == STARTUP else flag,
        progress_basis=ctx.progress_basis,
        failed_before_first_iteration=flag == STARTUP,
        job_ever_progressed=ctx.ever_progress,
        best_prior_iteration=max(
            (c.iteration for c in ctx.cycles[:-1] if c.known and c.iteration is not None),
            default=None,
        ),
    )


def decide(
    evidence: CycleEvidence,
    history: Sequence[PriorCycle] = (),
    config: PolicyConfig = PolicyConfig(),  # noqa: B008 - frozen dataclass, safe default
    fr_culprit_ranks: Sequence[int] | None = None,
    node_health: Sequence[NodeHealthNote] = (),
) -> Verdict:
    """STOP or RESTART for the current cycle, with the rule, basis, budgets and counts.

    The first entry of `RULES` that fires decides. `node_health`: the launchers' health
    reports for nodes that failed (or passed) their check at the end of this cycle; they
    are recorded in the verdict, and an unhealthy node that ran this cycle turns a ceiling
    STOP into `restart.unhealthy_node_excluded`.
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
    desync = all_rank_timeout(evidence) if primary is not None and primary.role != "root" else None
    cycles = (
        *(_Cycle.from_prior(p) for p in prior),
        _Cycle.current(cur_cycle, primary, prog, desync),
    )
    flagged = _flags(cycles, config.startup_window_s)
    flags = tuple(f for f, _ in flagged)
    counts = _counts(cycles, flags)
    notes = list(node_health)
    unhealthy = [n for n in notes if not n.healthy]
    ctx = _Ctx(
        evidence=evidence,
        primary=primary,
        prog=prog,
        config=config,
        cycles=cycles,
        flags=flags,
        progress_basis=flagged[-1][1],
        counts=counts,
        budgets=Budgets.left(config, counts),
        ever_progress=any(
            c.known and (c.iteration is not None or c.ckpt_iteration is not None) for c in cycles
        ),
        desync=desync,
        unhealthy=bool(unhealthy),
    )
    rule, basis = _first_rule(ctx)
    decision, rule, basis = _health_override(rule.decision, rule, basis, unhealthy)
    return _build(
        evidence,
        primary,
        reason,
        decision,
        rule,
        basis + _blame_sentence(primary),
        _history(ctx),
        ctx.budgets,
        fr_culprit_ranks,
        notes,
        prog,
        desync,
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
    history: History,
    budgets: Budgets,
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
    facts = evidence.launcher
    launcher: dict[str, object] | None = None
    if facts is not None:
        launcher = {
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
    fan_out = FanOut(
        ranks_seen=len(evidence.ranks_seen),
        failed_ranks=failed,
        failed_rank_count=len(failed),
        primary_rank=primary.rank if primary else None,
        nodes=list(evidence.nodes),
        primary_reason=reason,
        rank_source=primary.rank_source if primary else None,
        all_rank_timeout=desync,
        launcher=launcher,
    )
    return Verdict(
        decision=decision,
        basis=basis + budget_note(evidence.budget),  # the scan stopped at its budget
        rule=rule,
        primary=primary,
        cascades=list(evidence.cascades),
        progress=progress,
        history=history,
        budgets=budgets,
        evidence=lines,
        fan_out=fan_out,
        fr=FRFindings(culprit_ranks=sorted(set(fr))) if fr else None,
        scan=ScanInfo(
            lines=evidence.lines,
            bytes=evidence.bytes,
            truncated_last_line=evidence.truncated_last_line,
            budget=evidence.budget or None,
        ),
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
