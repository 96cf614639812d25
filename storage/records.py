"""Plain records the repository returns: `JobRecord`, `CycleRecord` (never ORM objects).

They are frozen dataclasses with `to_dict()` giving JSON-ready dicts (times as ISO 8601 UTC),
so the service, the dashboard, the MCP server and the CLI can pass them on unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from typing import Any


def as_utc(value: datetime | None) -> datetime | None:
    """Databases without time zones (SQLite) give naive datetimes; they are stored as UTC."""
    if value is None:
        return None
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    state: str
    created_at: datetime | None
    updated_at: datetime | None
    cycles: int = 0  # stored cycles (bounded by max_cycles_per_job)
    last_cycle: int | None = None
    last_decision: str | None = None
    last_rule: str | None = None
    last_failure_class: str | None = None
    last_analysed_at: datetime | None = None
    exit_code: int | None = None  # set with the final state (`end_job`)
    ended_at: datetime | None = None
    end_reason: str | None = None
    # the deciding verdict (last_decision ...): the cycle it is on, and whether the
    # launcher acted on it ("acted" | "recorded" | "pending": storage.job_end)
    decision_cycle: int | None = None
    verdict_effect: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class CycleRecord:
    job_id: str
    cycle: int
    status: str  # "registered" | "ended" | "analysed"
    node: str | None = None
    log_path: str | None = None
    log_size: int | None = None
    log_sha256: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    analysed_at: datetime | None = None
    decision: str | None = None
    rule: str | None = None
    basis: str | None = None
    fingerprint: str | None = None
    failure_class: str | None = None
    domain: str | None = None
    last_iteration: int | None = None
    last_checkpoint: str | None = None
    progress_known: bool | None = None
    llm_contributed: bool | None = None
    verdict: dict[str, Any] | None = None
    fr_findings: dict[str, Any] | None = None
    node_health: dict[str, Any] | None = None  # node -> health record (save_node_health)
    llm: dict[str, Any] | None = None
    audit_path: str | None = None
    analysis_requested_at: datetime | None = None  # an analysis in flight (or killed)
    analysis_error: str | None = None  # why the last analysis failed
    outcome: str | None = None  # succeeded | failed | stopped | interrupted (`end_cycle`)
    end_reason: str | None = None
    stragglers: dict[str, Any] | None = None  # straggler scores (revision 0008)
    # the newest complete checkpoint of the cycle (revision 0010): step, tier, bytes, when
    checkpoint_step: int | None = None
    checkpoint_tier: str | None = None
    checkpoint_size: int | None = None
    checkpoint_at: datetime | None = None
    evidence: list[dict[str, Any]] = field(default_factory=list)

    @property
    def log_identity(self) -> dict[str, Any]:
        return {"path": self.log_path, "size": self.log_size, "sha256": self.log_sha256}

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}
