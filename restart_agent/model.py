"""The restart agent's data model: evidence of one cycle, history of prior cycles, the verdict.

These types are the contract between `restart_agent/` and everything that builds on
it (storage, the service, the launcher, the LLM enrichment, the dashboard). They are
plain dataclasses with `to_dict()` / `from_dict()` so they cross process and database
boundaries as JSON. `Verdict.to_dict()` is the JSON object `relaunch analyze --format json`
prints (see SPEC.md).
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field
from enum import StrEnum
from typing import Any, Literal

from relaunch.restart_agent.verdict_parts import (
    Budgets,
    FanOut,
    FRFindings,
    History,
    LLMInfo,
    ScanInfo,
    StragglerReport,
)

__all__ = [
    "Budgets",
    "CascadeGroup",
    "CycleEvidence",
    "Decision",
    "Domain",
    "Evidence",
    "FRFindings",
    "FanOut",
    "History",
    "JobState",
    "LLMInfo",
    "LauncherFacts",
    "NodeHealthNote",
    "POLICY_LIMITS",
    "PolicyConfig",
    "PriorCycle",
    "ProcessExit",
    "Progress",
    "Role",
    "Rule",
    "ScanInfo",
    "StragglerReport",
    "Verdict",
]


class Decision(StrEnum):
    """A verdict's decision. A `StrEnum`: equal to, hashed and JSON-encoded as its value,
    so `"STOP" == Decision.STOP` and stored/printed verdicts keep their plain strings."""

    STOP = "STOP"
    RESTART = "RESTART"


class JobState(StrEnum):
    """A job's state as storage keeps it (`jobs.state`)."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    INTERRUPTED = "interrupted"
    UNKNOWN = "unknown"
    LOST = "lost"  # every launcher of the job stopped renewing its lease (storage.node_logs)


class Rule(StrEnum):
    """Ids of the verdict policy's rules (`Verdict.rule`; SPEC.md 'Verdict policy')."""

    STOP_SCHEDULER_TERMINATED = "stop.scheduler_terminated"
    STOP_CERTAIN_WORKLOAD_BUG = "stop.certain_workload_bug"
    STOP_USER_IMPORT_ERROR = "stop.user_import_error"
    STOP_INVALID_CONFIG = "stop.invalid_config"
    STOP_UNKNOWN_PROGRESS_RECURRENCE = "stop.unknown_progress_recurrence"
    STOP_STARTUP_RECURRENCE = "stop.startup_recurrence"
    STOP_WORKLOAD_RECURRENCE = "stop.workload_recurrence"
    STOP_SAME_ROOT_CEILING = "stop.same_root_ceiling"
    STOP_JOB_NO_PROGRESS_CEILING = "stop.job_no_progress_ceiling"
    RESTART_PROGRESS = "restart.progress"
    RESTART_PROGRESS_UNKNOWN = "restart.progress_unknown"
    RESTART_NO_EVIDENCE = "restart.no_evidence"
    RESTART_CASCADE_ONLY = "restart.cascade_only"
    RESTART_WORKLOAD_FIRST = "restart.workload_first"
    RESTART_RETRYABLE_WORKLOAD = "restart.retryable_workload"
    RESTART_INFRASTRUCTURE = "restart.infrastructure"
    RESTART_UNHEALTHY_NODE_EXCLUDED = "restart.unhealthy_node_excluded"
    # the LLM's one override (restart_agent/llm/policy.py), never the deterministic policy's
    LLM_GROUNDED_WORKLOAD_BUG = "llm_grounded_workload_bug"

    @property
    def decision(self) -> Decision:
        """The decision a rule makes (its id's prefix)."""
        return Decision.RESTART if self.value.startswith("restart.") else Decision.STOP


def _decision_or_none(v: Any) -> Decision | None:
    """A stored decision string as a `Decision` (None when absent or not one)."""
    try:
        return Decision(v) if v is not None else None
    except ValueError:
        return None


Domain = Literal["infrastructure", "workload", "unknown"]
Role = Literal["root", "cascade", "confirmation", "teardown", "diagnostic"]


@dataclass(frozen=True)
class Evidence:
    """One log line that matched a pattern of the registry."""

    line: int  # 1-based line number in the cycle log
    rank: int | None  # global rank the line came from, if a prefix said so
    pattern_id: str  # row id in restart_agent/patterns table
    failure_class: str  # e.g. "cuda_oom", "nccl_watchdog_timeout", "python_syntax_error"
    domain: Domain
    role: Role
    recoverability: str  # hint from the pattern table: "retry", "stop", "unknown", ...
    text: str  # the line's text without its rank prefix (bounded length)
    fingerprint: str  # stable across cycles and ranks (class + normalised message)
    entity: str | None = None  # affected entity kept apart from the fingerprint
    node: str | None = None  # host/node name when the log says so
    # traceback lines of the same rank that led to this line: [{"line": n, "text": s}, ...]
    context: list[dict[str, Any]] = field(default_factory=list)
    user_frame: str | None = None  # "path:line" of the innermost frame of the user's code
    # how the rank was known: "prefix", "message", "launcher", "elastic_root_cause",
    # "elastic_exit", "silent_rank", "kernel", "mpirun" (None: no rank)
    rank_source: str | None = None
    # for an exception no specific row names: how its domain was decided from the structure
    # of the line and its traceback (restart_agent/structural.py); None for a specific row
    structural: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Evidence:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass(frozen=True)
class CascadeGroup:
    """Cascade/teardown evidence of one failure class, folded: count and rank spread."""

    failure_class: str
    role: Role
    count: int
    ranks: list[int]  # sorted, distinct
    first_line: int
    example: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CascadeGroup:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass(frozen=True)
class Progress:
    """Progress seen in one cycle. `known=False` means nothing matched: unknown is not 'none'."""

    known: bool = False
    last_iteration: int | None = None
    first_iteration: int | None = None
    last_checkpoint: str | None = None  # path or tag of the last checkpoint saved
    checkpoint_iteration: int | None = None
    dialect: str | None = None  # which progress dialect matched (megatron, hf, lightning, ...)
    line: int | None = None  # line of the last progress report
    # "dialect" (log lines) or "launcher" (iterations reported through relaunch.client)
    source: str | None = None
    # the launcher saw the progress client in use and no iteration at all this cycle
    no_iteration: bool = False
    duration_s: float | None = None  # cycle duration, when the launcher said it
    # no iteration line, but the log shows the job ran past startup (`activity` dialects:
    # a collective sequence number in the hundreds): progress unknown, not a startup failure
    ran_past_startup: bool = False
    # the launcher declared a hang before the rank's first heartbeat (`hang.initial`)
    initial_hang: bool = False
    # the span of the log's own timestamps (restart_agent/timestamps.py), seconds
    log_span_s: float | None = None
    # where `duration_s` came from: "launcher" (its cycle_end fact) or "log_timestamps"
    duration_source: str | None = None
    # the newest complete checkpoint the launcher reported this cycle (its `checkpoint`
    # fact): {"step", "tier", "size", "path", "at" (Unix seconds), "duration_s", ...}
    checkpoint: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Progress:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass(frozen=True)
class ProcessExit:
    """A worker process's exit as a log line reported it (torch elastic, or the launcher).

    `source`: "elastic_root_cause" (the `Root Cause (first observed failure)` entry),
    "elastic_failure" (another entry of the `Failures:` block), "elastic_exit" (the agent's
    `failed (exitcode: C) local_rank: L (pid: P)` line) or "launcher" (a `rank_exit` fact).
    """

    source: str
    line: int
    rank: int | None = None  # global rank (None: only the local rank is known)
    local_rank: int | None = None
    exitcode: int | None = None
    signal: str | None = None  # "SIGKILL", ... when the exit code says a signal
    pid: int | None = None
    node: str | None = None
    first: bool = False  # the launcher / elastic says this was the first failure
    t_s: float | None = None  # seconds since the cycle started (launcher facts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProcessExit:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass(frozen=True)
class LauncherFacts:
    """What the launcher knew about one cycle (its `[relaunch] fact: {...}` lines).

    Highest-trust evidence: `first_failing_rank` (the earliest `rank_exit` with
    `first: true`), every exit, hangs declared by heartbeat, the last iteration each rank
    reported through `relaunch.client`, node health and the cycle duration.
    """

    facts: int = 0  # fact lines read
    cycle: int | None = None
    world_size: int | None = None
    exits: list[ProcessExit] = field(default_factory=list)
    first_failing_rank: int | None = None
    stopped_ranks: list[int] = field(default_factory=list)
    # [{"rank", "silent_s", "section", "initial", "others", "line"}]
    hangs: list[dict[str, Any]] = field(default_factory=list)
    iterations: dict[int, int] = field(default_factory=dict)  # rank -> last iteration
    silent_ranks: list[int] = field(default_factory=list)  # ranks that reported no iteration
    client: bool | None = None  # any rank used the progress client (None: no fact said)
    node_health: list[dict[str, Any]] = field(default_factory=list)  # {"node","healthy","reason"}
    outcome: str | None = None
    duration_s: float | None = None
    # `straggler` facts, the latest per (node, rank): {"rank", "node", "section", "relative",
    # "individual", "threshold", "reports", "report", "line"}
    stragglers: list[dict[str, Any]] = field(default_factory=list)
    # `straggler_scores` facts, one per node: {"node", "threshold", "reports", "ranks"}
    straggler_scores: list[dict[str, Any]] = field(default_factory=list)
    # the newest `checkpoint` fact: {"step", "tier", "size", "path", "at", "duration_s",
    # "rank", "line"} (relaunch.checkpoint's report of a complete checkpoint)
    checkpoint: dict[str, Any] | None = None

    @property
    def first_exit(self) -> ProcessExit | None:
        firsts = [e for e in self.exits if e.first and e.rank == self.first_failing_rank]
        return firsts[0] if firsts else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["iterations"] = {str(k): v for k, v in self.iterations.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LauncherFacts:
        kw = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        kw["exits"] = [ProcessExit.from_dict(e) for e in kw.get("exits") or []]
        kw["iterations"] = {int(k): int(v) for k, v in (kw.get("iterations") or {}).items()}
        return cls(**kw)


@dataclass(frozen=True)
class CycleEvidence:
    """Everything the deterministic scan of one cycle log found, before any policy."""

    primary: Evidence | None
    roots: list[Evidence]  # root-capable evidence, in log order (bounded)
    cascades: list[CascadeGroup]
    diagnostics: list[Evidence]  # advice/confirmation lines worth showing (bounded)
    progress: Progress
    ranks_seen: list[int]
    failed_ranks: list[int]  # ranks that produced root or cascade evidence
    nodes: list[str]
    lines: int
    bytes: int
    truncated_last_line: bool = False
    # first cascade/teardown line per (class, rank): lets decide() re-pick the primary
    # on the Flight Recorder's culprit ranks when a cycle only shows cascades
    cascade_evidence: list[Evidence] = field(default_factory=list)
    first_teardown_line: int | None = None  # roots after this line are likely teardown noise
    primary_reason: str = ""  # why `primary` was chosen (earliest root, cascade only, ...)
    root_lines: int = 0  # root-capable lines seen (all ranks, before dedup)
    launcher: LauncherFacts | None = None  # the launcher's `[relaunch] fact:` lines, if any
    exits: list[ProcessExit] = field(default_factory=list)  # torch elastic's exit reports
    # the analysis budget reached, if it was: the evidence is of the log's first
    # `bytes_read` bytes (restart_agent.budget.reached)
    budget: dict[str, Any] | None = None


@dataclass(frozen=True)
class PriorCycle:
    """What the policy needs to know about one earlier cycle of the same job."""

    cycle: int
    decision: Decision | None
    fingerprint: str | None
    failure_class: str | None
    domain: Domain | None
    last_iteration: int | None
    last_checkpoint: str | None = None
    progress_known: bool = False
    entity: str | None = None
    checkpoint_iteration: int | None = None
    recoverability: str | None = None
    no_iteration: bool = False  # the launcher saw no iteration at all (client in use)
    duration_s: float | None = None  # cycle duration the launcher reported
    ran_past_startup: bool = False  # the log showed the job ran past startup (no iteration)
    initial_hang: bool = False  # the launcher declared a hang before the first heartbeat
    # every rank timed out in one collective (restart_agent/desync.py): `OP@SEQ/RANKS`
    all_rank_timeout: str | None = None

    @classmethod
    def from_verdict(cls, cycle: int, verdict: dict[str, Any]) -> PriorCycle:
        """Build from a stored `Verdict.to_dict()` object."""
        primary = verdict.get("primary") or {}
        progress = verdict.get("progress") or {}
        return cls(
            cycle=cycle,
            decision=_decision_or_none(verdict.get("decision")),
            fingerprint=primary.get("fingerprint"),
            failure_class=primary.get("failure_class"),
            domain=primary.get("domain"),
            last_iteration=progress.get("last_iteration"),
            last_checkpoint=progress.get("last_checkpoint"),
            progress_known=bool(progress.get("known")),
            entity=primary.get("entity"),
            checkpoint_iteration=progress.get("checkpoint_iteration"),
            recoverability=primary.get("recoverability"),
            no_iteration=bool(progress.get("no_iteration")),
            duration_s=_num(progress.get("duration_s")),
            ran_past_startup=bool(progress.get("ran_past_startup")),
            initial_hang=bool(progress.get("initial_hang")),
            all_rank_timeout=_str((verdict.get("fan_out") or {}).get("all_rank_timeout")),
        )


def _str(v: Any) -> str | None:
    return v[:200] if isinstance(v, str) and v else None


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if v == v and abs(v) < 1e12 else None


@dataclass(frozen=True)
class NodeHealthNote:
    """A node's health check at the end of a cycle, as its launcher reported it.

    `ran_this_cycle`: the node took part in the analysed cycle and failed its check before
    the next rendezvous (a suspect for this cycle's failure); False when it failed before
    joining the cycle at all. `excluded_from_cycle` is the cycle the node did not join.
    """

    node: str
    healthy: bool
    reason: str = ""
    ran_this_cycle: bool = False
    excluded_from_cycle: int | None = None
    failed_checks: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["failed_checks"] = list(self.failed_checks)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NodeHealthNote:
        """From a launcher health record (`HealthReport.to_dict()` plus the cycle fields).

        Raises ValueError when `node` or `healthy` is missing or of the wrong type.
        """
        node, healthy = d.get("node"), d.get("healthy")
        if not isinstance(node, (str, int)) or isinstance(node, bool) or str(node) == "":
            raise ValueError("a node health record needs a 'node' name")
        if not isinstance(healthy, bool):
            raise ValueError("a node health record needs 'healthy': true or false")
        excluded = d.get("excluded_from_cycle")
        failed = d.get("failed_checks")
        if failed is None:
            failed = [
                str(c.get("name"))
                for c in d.get("checks") or []
                if isinstance(c, dict) and c.get("status") == "fail"
            ]
        return cls(
            node=str(node),
            healthy=healthy,
            reason=str(d.get("reason") or "")[:500],
            ran_this_cycle=bool(d.get("ran_this_cycle", False)),
            excluded_from_cycle=excluded if type(excluded) is int else None,
            failed_checks=tuple(str(c) for c in failed),
        )


# name -> (type, lowest, highest) of every PolicyConfig field (validated by from_mapping)
POLICY_LIMITS: dict[str, tuple[type, float, float]] = {
    "same_root_no_progress_retries": (int, 1, 1000),
    "job_no_progress_ceiling": (int, 1, 1000),
    "workload_recurrence_stop": (int, 1, 1000),
    "startup_window_s": (float, 0, 10_000_000),
}


@dataclass(frozen=True)
class PolicyConfig:
    """Budgets of the verdict policy (SPEC.md 'Verdict policy')."""

    same_root_no_progress_retries: int = 3  # infrastructure ceiling per root
    job_no_progress_ceiling: int = 5  # consecutive failed cycles without progress, any root
    workload_recurrence_stop: int = 1  # probable workload bug: STOP on first identical recurrence
    # a cycle without any progress report that the launcher says ran longer than this is
    # "progress unknown" (a silent long-running job), never a startup failure
    startup_window_s: float = 600.0

    @classmethod
    def from_mapping(cls, d: Any) -> PolicyConfig:
        """From a mapping (YAML, JSON, flags); unknown keys or bad values are a ValueError."""
        if d is None:
            return cls()
        if not isinstance(d, dict):
            raise ValueError("policy config must be a mapping of field names to numbers")
        unknown = sorted(str(k) for k in d if k not in POLICY_LIMITS)
        if unknown:
            raise ValueError(
                f"unknown policy config key(s): {', '.join(unknown)} "
                f"(known: {', '.join(POLICY_LIMITS)})"
            )
        out: dict[str, Any] = {}
        for key, value in d.items():
            typ, lo, hi = POLICY_LIMITS[key]
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if ok and typ is int and not (isinstance(value, int) or float(value).is_integer()):
                ok = False
            if not ok or value != value or not lo <= value <= hi:
                kind = "an integer" if typ is int else "a number"
                raise ValueError(
                    f"policy config {key} must be {kind} from {lo:g} to {hi:g}, got {value!r}"
                )
            out[key] = typ(value)
        return cls(**out)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Verdict:
    """The decision for one cycle and everything that explains it."""

    decision: Decision
    basis: str  # one sentence a person can read
    # id of the policy rule that decided (a verdict stored by an older version, read with
    # `read`, may name a rule this version does not have: then its plain string)
    rule: Rule | str
    primary: Evidence | None
    cascades: list[CascadeGroup]
    progress: Progress
    history: History  # same_root_prior_cycles, consecutive_no_progress, ...
    budgets: Budgets  # the configured ceilings and what is left
    evidence: list[Evidence] = field(default_factory=list)  # lines that support the verdict
    fan_out: FanOut = field(default_factory=FanOut)  # ranks, nodes affected
    fr: FRFindings | None = None  # Flight Recorder findings used, if any
    llm: LLMInfo = field(default_factory=LLMInfo.none)
    scan: ScanInfo = field(default_factory=ScanInfo)  # lines, bytes, timings
    node_health: list[NodeHealthNote] = field(default_factory=list)  # launchers' reports
    # the launcher's straggler scores and who they name (restart_agent/stragglers.py)
    stragglers: StragglerReport | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": str(self.decision),  # plain strings: the JSON/DB form
            "basis": self.basis,
            "rule": str(self.rule),
            "primary": self.primary.to_dict() if self.primary else None,
            "cascades": [c.to_dict() for c in self.cascades],
            "progress": self.progress.to_dict(),
            "history": self.history.to_dict(),
            "budgets": self.budgets.to_dict(),
            "evidence": [e.to_dict() for e in self.evidence],
            "fan_out": self.fan_out.to_dict(),
            "fr": self.fr.to_dict() if self.fr is not None else None,
            "llm": self.llm.to_dict(),
            "scan": self.scan.to_dict(),
            "node_health": [n.to_dict() for n in self.node_health],
            "stragglers": self.stragglers.to_dict() if self.stragglers is not None else None,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        """From `to_dict()`'s form (`from_dict(v.to_dict()).to_dict() == v.to_dict()`).

        Raises ValueError on a decision or rule id that is not one of the enums', KeyError
        when `decision`, `rule` or `progress` is missing."""
        primary = d.get("primary")
        return cls(
            decision=Decision(d["decision"]),
            basis=str(d.get("basis") or ""),
            rule=Rule(d["rule"]),
            primary=Evidence.from_dict(primary) if primary else None,
            cascades=[CascadeGroup.from_dict(c) for c in d.get("cascades") or []],
            progress=Progress.from_dict(d["progress"]),
            history=History.from_dict(d.get("history") or {}),
            budgets=Budgets.from_dict(d.get("budgets") or {}),
            evidence=[Evidence.from_dict(e) for e in d.get("evidence") or []],
            fan_out=FanOut.from_dict(d.get("fan_out") or {}),
            fr=FRFindings.from_dict(d["fr"]) if d.get("fr") is not None else None,
            llm=LLMInfo.from_dict(d.get("llm") or {"contributed": False}),
            scan=ScanInfo.from_dict(d.get("scan") or {}),
            node_health=[NodeHealthNote.from_dict(n) for n in d.get("node_health") or []],
            stragglers=(
                StragglerReport.from_dict(d["stragglers"])
                if d.get("stragglers") is not None
                else None
            ),
        )

    @classmethod
    def read(cls, d: Any) -> Verdict | None:
        """A verdict object from a JSON boundary (a stored row, an HTTP answer, an event),
        read leniently for the code that shows or routes it: a rule id this version does not
        know stays its string, missing parts read as their defaults (an absent `progress` as
        unknown progress) and evidence missing keys reads them as None. None when `d` is not
        an object or its decision is not STOP or RESTART. `from_dict` is the strict reader
        whose `to_dict()` gives the stored JSON back."""
        if not isinstance(d, dict):
            return None
        decision = _decision_or_none(d.get("decision"))
        if decision is None:
            return None
        rule = str(d.get("rule") or "")
        try:
            typed_rule: Rule | str = Rule(rule)
        except ValueError:  # a rule id of another version: kept as it was stored
            typed_rule = rule
        primary = _evidence_or_none(d.get("primary"))

        def part(name: str) -> dict[str, Any]:
            value = d.get(name)
            return value if isinstance(value, dict) else {}

        notes = []
        for n in _list(d.get("node_health")):
            try:
                notes.append(NodeHealthNote.from_dict(n))
            except (ValueError, AttributeError):
                continue  # not a health record: not shown
        return cls(
            decision=decision,
            basis=str(d.get("basis") or ""),
            rule=typed_rule,
            primary=Evidence.from_dict(primary) if primary else None,
            cascades=[
                CascadeGroup.from_dict({**dict.fromkeys(CascadeGroup.__dataclass_fields__), **c})
                for c in _list(d.get("cascades"))
                if isinstance(c, dict)
            ],
            progress=Progress.from_dict(part("progress")),
            history=History.from_dict(part("history")),
            budgets=Budgets.from_dict(part("budgets")),
            evidence=[
                Evidence.from_dict(e) for e in map(_evidence_or_none, _list(d.get("evidence"))) if e
            ],
            fan_out=FanOut.from_dict(part("fan_out")),
            fr=FRFindings.from_dict(d.get("fr")) if isinstance(d.get("fr"), dict) else None,
            llm=LLMInfo.from_dict(part("llm") or {"contributed": False}),
            scan=ScanInfo.from_dict(part("scan")),
            node_health=notes,
            stragglers=(
                StragglerReport.from_dict(d.get("stragglers"))
                if isinstance(d.get("stragglers"), dict)
                else None
            ),
        )


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _evidence_or_none(d: Any) -> dict[str, Any] | None:
    """A stored evidence object with every `Evidence` key (missing ones None)."""
    if not isinstance(d, dict):
        return None
    return {**dict.fromkeys(_EVIDENCE_REQUIRED), **d}


# the keys `Evidence` has no default for (read as None when a stored object lacks them)
_EVIDENCE_REQUIRED = tuple(
    name
    for name, f in Evidence.__dataclass_fields__.items()
    if f.default is MISSING and f.default_factory is MISSING
)
