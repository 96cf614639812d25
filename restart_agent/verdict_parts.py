"""The typed parts of a `Verdict` that were open JSON objects: history, budgets, fan-out, ...

Each part is a frozen dataclass whose fields are the keys its JSON object holds, so code
reads `verdict.history.same_root_prior_cycles`, `verdict.llm.contributed`, never
`verdict["history"]["..."]`. The JSON form is the contract (stored verdicts, audit
artifacts, `relaunch analyze --format json`, the API), so every part keeps it exactly:

- a part built by the policy (`History(...)`, `Budgets.left(...)`) writes its fields in
  declaration order, which is the order the policy always wrote them;
- a part read by `from_dict` remembers which keys the stored object had, in their order,
  and any key it does not know (`extra`): `from_dict(d).to_dict() == d` key for key and
  value for value, for old verdicts that lack newer keys as for new ones. Values are taken
  as stored (no conversion): a part describes the shape, it does not repair data.

Reading an old verdict that lacks a key gives the field's default (0, None, False, []).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Protocol, TypeVar

_P = TypeVar("_P", bound="_Part")


@dataclass(frozen=True)
class _Part:
    """A JSON object of the verdict with typed keys (see the module docstring)."""

    # the keys of the object it was read from, in order (None: built here, every field)
    keys_: tuple[str, ...] | None = field(default=None, repr=False, compare=False, kw_only=True)
    # stored keys this version does not know, kept as they were
    extra: dict[str, Any] = field(default_factory=dict, repr=False, kw_only=True)
    # fields left out of a built part's JSON while they are None (keys that are optional)
    OMIT_NONE: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.name not in ("keys_", "extra"))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (same keys, same order, same values as it was stored or built)."""
        names = self._names()
        if self.keys_ is None:
            return {
                n: getattr(self, n)
                for n in names
                if not (n in self.OMIT_NONE and getattr(self, n) is None)
            }
        return {k: getattr(self, k) if k in names else self.extra[k] for k in self.keys_}

    def with_(self: _P, **changes: Any) -> _P:
        """A copy with these keys set (a key it did not have is added at the end, as a
        JSON object's would be)."""
        return type(self).from_dict({**self.to_dict(), **changes})

    @classmethod
    def from_dict(cls: type[_P], d: Any) -> _P:
        """From the stored JSON object (a non-object reads as an empty one)."""
        if not isinstance(d, dict):
            d = {}
        names = set(cls._names())
        known = {k: v for k, v in d.items() if k in names}
        extra = {k: v for k, v in d.items() if k not in names}
        return cls(**known, keys_=tuple(d), extra=extra)


@dataclass(frozen=True)
class History(_Part):
    """`Verdict.history`: the policy's counts over the window since the job last advanced,
    then this cycle's progress relative to the job (docs/restart_agent.md)."""

    same_root_prior_cycles: int = 0
    identical_prior_cycles: int = 0
    same_root_retries_without_progress: int = 0
    identical_retries_without_progress: int = 0
    consecutive_no_progress: int = 0
    window_start_cycle: int = 0
    identical_cycles_progress_unknown: int = 0
    prior_cycles: int = 0
    progress_since_prior: str | None = None  # "advanced" | "none" | "unknown"
    progress_basis: str | None = None  # why (restart_agent.policy's flags)
    failed_before_first_iteration: bool = False
    job_ever_progressed: bool = False
    best_prior_iteration: int | None = None


class _RetryCounts(Protocol):
    """What `Budgets.left` needs of the policy's counts (`restart_agent.policy.Counts`)."""

    @property
    def same_root_retries_without_progress(self) -> int: ...
    @property
    def identical_retries_without_progress(self) -> int: ...
    @property
    def consecutive_no_progress(self) -> int: ...


class _Ceilings(Protocol):
    """What `Budgets.left` needs of the policy's config (`model.PolicyConfig`)."""

    @property
    def same_root_no_progress_retries(self) -> int: ...
    @property
    def job_no_progress_ceiling(self) -> int: ...
    @property
    def workload_recurrence_stop(self) -> int: ...
    @property
    def startup_window_s(self) -> float: ...


@dataclass(frozen=True)
class Budgets(_Part):
    """`Verdict.budgets`: the policy's ceilings and what is left of each."""

    same_root_no_progress_retries: int = 0
    same_root_retries_left: int = 0
    job_no_progress_ceiling: int = 0
    job_retries_left: int = 0
    workload_recurrence_stop: int = 0
    workload_recurrences_left: int = 0
    startup_window_s: float = 0.0

    @classmethod
    def left(cls, config: _Ceilings, counts: _RetryCounts) -> Budgets:
        """Each ceiling of `config` and how much of it `counts` leave."""
        return cls(
            same_root_no_progress_retries=config.same_root_no_progress_retries,
            same_root_retries_left=max(
                0, config.same_root_no_progress_retries - counts.same_root_retries_without_progress
            ),
            job_no_progress_ceiling=config.job_no_progress_ceiling,
            job_retries_left=max(
                0, config.job_no_progress_ceiling - counts.consecutive_no_progress
            ),
            workload_recurrence_stop=config.workload_recurrence_stop,
            workload_recurrences_left=max(
                0, config.workload_recurrence_stop - counts.identical_retries_without_progress
            ),
            startup_window_s=config.startup_window_s,
        )


@dataclass(frozen=True)
class FanOut(_Part):
    """`Verdict.fan_out`: which ranks and nodes the failure touched, and why the primary
    evidence is the one it is. `launcher`: a digest of the launcher's facts, when it had any
    ({"facts", "first_failing_rank", "exits", "hangs", "iterations_max", "silent_ranks",
    "client", "duration_s", "node_health"})."""

    ranks_seen: int = 0
    failed_ranks: list[int] = field(default_factory=list)
    failed_rank_count: int = 0
    primary_rank: int | None = None
    nodes: list[str] = field(default_factory=list)
    primary_reason: str = ""
    rank_source: str | None = None
    all_rank_timeout: str | None = None  # every rank timed out in one collective: OP@SEQ/RANKS
    launcher: dict[str, Any] | None = None
    OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"launcher"})


@dataclass(frozen=True)
class FRFindings(_Part):
    """`Verdict.fr`: the Flight Recorder findings the policy used (the culprit ranks)."""

    culprit_ranks: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class ScanInfo(_Part):
    """`Verdict.scan`: how much of the log was read (`budget`: the analysis budget reached,
    restart_agent.budget; `seconds`/`mb_per_s`: the scan's time, from `analyze_file`)."""

    lines: int = 0
    bytes: int = 0
    truncated_last_line: bool = False
    budget: dict[str, Any] | None = None
    seconds: float | None = None
    mb_per_s: float | None = None
    OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"budget", "seconds", "mb_per_s"})

    def timed(self, seconds: float) -> ScanInfo:
        """This scan with its time (`seconds`, and `mb_per_s`: None for a zero time)."""
        d = self.to_dict()
        d["seconds"] = round(seconds, 4)
        d["mb_per_s"] = round(self.bytes / 1e6 / seconds, 1) if seconds > 0 else None
        return ScanInfo.from_dict(d)


@dataclass(frozen=True)
class LLMInfo(_Part):
    """`Verdict.llm`: what an LLM enrichment said and whether it changed the verdict
    (restart_agent/llm/policy.py writes it; `{"contributed": false}` when none ran)."""

    contributed: bool = False
    how: str | None = None  # what the answer changed, when it contributed
    model: str | None = None
    tokens: dict[str, Any] = field(default_factory=dict)
    latency_ms: float | None = None
    grounded: bool = False
    error: str | None = None
    late: bool = False
    status: str | None = None  # "ok" or why the call failed
    explanation: str | None = None
    owner: str | None = None
    recovery_outlook: str | None = None
    recovery_text: str | None = None
    deterministic_workload_bug: bool | None = None
    claims: dict[str, Any] = field(default_factory=dict)
    citations: dict[str, Any] = field(default_factory=dict)
    response_format: str | None = None
    attempts: int | None = None
    prompt: dict[str, Any] | None = None
    not_used_because: str | None = None  # why a grounded answer did not change it
    # the deterministic decision, rule and basis an answer replaced
    deterministic: dict[str, Any] | None = None

    @classmethod
    def none(cls) -> LLMInfo:
        """No enrichment ran: `{"contributed": false}`."""
        return cls.from_dict({"contributed": False})


@dataclass(frozen=True)
class StragglerReport(_Part):
    """`Verdict.stragglers`: the launcher's straggler reports (restart_agent/stragglers.py):
    every named straggler, the persistent ones' ranks, per-node scores, the suspect."""

    named: list[dict[str, Any]] = field(default_factory=list)
    persistent: list[int] = field(default_factory=list)
    scores: list[dict[str, Any]] = field(default_factory=list)
    suspect_rank: int | None = None
    min_reports: int = 0
