"""Node-health result types: one `CheckResult` per check, combined into a `HealthReport`.

A check is `ok`, `fail` (the node is unhealthy), `not_available` (nothing to check here,
e.g. no NVIDIA driver) or `error` (the check itself broke; fails open). Only `fail` makes a
report unhealthy: a health check must never take a good node out of the job by accident.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["ok", "fail", "not_available", "error"]
STATUSES: tuple[str, ...] = ("ok", "fail", "not_available", "error")


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one health check (a GPU property, the external service, ...)."""

    name: str
    status: Status
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown check status {self.status!r}; expected one of {STATUSES}")

    @property
    def failed(self) -> bool:
        return self.status == "fail"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "data": self.data}


@dataclass(frozen=True)
class HealthReport:
    """Combined verdict for one node: `healthy` is False only when some check failed."""

    healthy: bool
    checks: list[CheckResult]
    reason: str
    node: str | None = None
    duration_s: float = 0.0

    @classmethod
    def from_checks(
        cls, checks: Iterable[CheckResult], *, node: str | None = None, duration_s: float = 0.0
    ) -> HealthReport:
        checks = list(checks)
        failed = [c for c in checks if c.failed]
        errors = [c for c in checks if c.status == "error"]
        if failed:
            reason = "; ".join(f"{c.name}: {c.detail}" if c.detail else c.name for c in failed)
        elif errors:
            reason = "no check failed; failing open after errors: " + "; ".join(
                f"{c.name}: {c.detail}" if c.detail else c.name for c in errors
            )
        elif checks and all(c.status == "not_available" for c in checks):
            reason = "no health checks available on this node"
        else:
            reason = "all available health checks passed"
        return cls(
            healthy=not failed, checks=checks, reason=reason, node=node, duration_s=duration_s
        )

    @property
    def failed_checks(self) -> list[CheckResult]:
        return [c for c in self.checks if c.failed]

    def to_dict(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy,
            "reason": self.reason,
            "node": self.node,
            "duration_s": round(self.duration_s, 6),
            "checks": [c.to_dict() for c in self.checks],
        }
