"""Request and response bodies of the HTTP API (they generate the OpenAPI document)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr


class LogSubmission(BaseModel):
    """POST /logs body (NVRx attrsvc compatible; unknown fields are ignored)."""

    model_config = ConfigDict(extra="ignore")

    log_path: StrictStr = Field(description="absolute path of the cycle log under an allowed root")
    user: StrictStr | None = Field(default=None, description="job owner")
    job_id: StrictStr | None = Field(
        default=None, description="job id; default: the file stem plus a short path hash"
    )
    cycle_id: StrictInt | None = Field(
        default=None, ge=0, description="restart cycle (a bool is rejected)"
    )
    analysis_intent: Literal["track_only", "progressive", "terminal"] = Field(
        default="track_only",
        description="track_only: register; progressive: read as it grows; terminal: analyse now",
    )
    fact_key: StrictStr | None = Field(
        default=None,
        pattern="^[0-9a-f]{64}$",
        description="the launcher's key of this cycle's fact lines (64 hex), sent at the "
        "cycle's end: only facts signed with it count; kept in memory, never answered",
    )


class SubmitResponse(BaseModel):
    model_config = ConfigDict(extra="allow")

    submitted: bool
    normalized_path: str
    job_id: str
    cycle_id: int
    analysis_intent: str
    mode: str
    status: Literal["pending", "completed"]


class Recommendation(BaseModel):
    action: Literal["STOP", "RESTART", "UNKNOWN"]
    reason: str
    source: Literal["deterministic", "llm"]


class LogResult(BaseModel):
    """GET /logs answer. `result` is the full verdict (plus NVRx's `state`/`module`)."""

    model_config = ConfigDict(extra="allow")

    status: Literal["pending", "completed"]
    recommendation: Recommendation
    result: dict[str, Any] | None
    job_id: str
    cycle_id: int
    log_path: str
    cached: bool = False
    analysis: dict[str, Any] | None = Field(
        default=None, description="bytes_read (all passes), tail_bytes (final pass), file_resets"
    )


class Health(BaseModel):
    status: Literal["ok", "degraded", "fail"]
    issues: list[str]


class VerdictAnswer(BaseModel):
    model_config = ConfigDict(extra="allow")

    job_id: str
    cycle: int
    status: Literal["pending", "completed", "failed"]
    verdict: dict[str, Any] | None
    cached: bool = False
    error: str | None = Field(default=None, description="status failed: why the analysis failed")
    message: str | None = Field(
        default=None, description="202: the analysis runs on; where to poll for the verdict"
    )


class FRAnswer(BaseModel):
    job_id: str
    cycle: int
    files: list[str]
    findings: dict[str, Any]
    verdict: dict[str, Any] | None


class NodeHealthSubmission(BaseModel):
    """One node's health report (`HealthReport.to_dict()` plus where it stands in the job)."""

    model_config = ConfigDict(extra="allow")

    node: str = Field(min_length=1, max_length=255, description="node0, node1, ... or a host")
    healthy: StrictBool
    reason: str = Field(default="", max_length=4000)
    host: str | None = Field(default=None, max_length=255)
    ran_this_cycle: StrictBool = Field(
        default=False, description="the node ran this cycle and failed its check after it"
    )
    excluded_from_cycle: int | None = Field(default=None, ge=0)
    checks: list[dict[str, Any]] = Field(default_factory=list, max_length=256)
    duration_s: float | None = None


class NodeHealthAnswer(BaseModel):
    job_id: str
    cycle: int
    node: str
    verdict: dict[str, Any] | None
