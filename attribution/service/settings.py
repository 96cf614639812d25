"""Settings of one service instance: where it listens, what it may read, its limits."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from relaunch.restart_agent.budget import DEFAULT_CPU_SECONDS, DEFAULT_MAX_KEPT, AnalysisBudget
from relaunch.restart_agent.model import PolicyConfig

if TYPE_CHECKING:
    from relaunch.attribution.core.listeners import AlertListener
    from relaunch.restart_agent.llm.config import LLMConfig


@dataclass
class ServiceSettings:
    """Everything `create_app` needs. `relaunch serve` builds one from its flags."""

    db_url: str | None = None  # None: sqlite:///$RELAUNCH_HOME/relaunch.db
    allowed_roots: list[Path] = field(default_factory=list)  # empty: nothing is readable
    token: str | None = None  # bearer token; None disables auth
    audit_dir: Path | None = None
    data_dir: Path | None = None  # uploads and FR dumps; default $RELAUNCH_HOME/service
    webhook_url: str | None = None
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    llm_config: LLMConfig | None = None  # when configured
    slack: AlertListener | None = None  # a ready engine listener (a SlackNotifier)
    # limits
    max_body_bytes: int = 1 << 20  # JSON bodies
    max_upload_bytes: int = 1 << 30  # uploaded cycle logs / FR dumps (streamed to disk)
    rate_limit_per_s: float = 200.0  # sustained requests per client and second
    rate_limit_burst: int = 400
    max_pending_analyses: int = 256  # queued + running analyses before 503
    analysis_workers: int = 2
    max_tracked_logs: int = 10_000
    progressive_poll_s: float = 0.5
    # longest a request waits for an analysis (GET /logs?wait=true, uploads, FR dumps,
    # node-health re-decisions); past it the answer says the verdict is pending
    analysis_timeout_s: float = 60.0
    # each analysis's budget (restart_agent/budget.py): CPU seconds of scanning and evidence
    # lines kept, after which the verdict is made on what was read and says so (None: none)
    analysis_cpu_seconds: float | None = DEFAULT_CPU_SECONDS
    analysis_max_kept: int | None = DEFAULT_MAX_KEPT
    # multi-node cycles (attribution/service/gather.py): longest wait after a cycle's first
    # node ended for the other nodes' logs; a launcher lease not renewed for
    # lease_timeout_s (all of a job's launchers) records the job `lost`
    node_wait_s: float = 60.0
    lease_timeout_s: float = 60.0
    resume_unfinished: bool = True  # on start: resume analyses a killed service left
    # test-only: called with the job id before each analysis (attribution/service/hold.py)
    analysis_hold: Callable[[str], None] | None = None
    dashboard: bool = True
    dashboard_public: bool = False  # with a token: dashboard pages readable without it
    # Host header allow-list (attribution/service/guards.py): None = the default set for
    # `bind_host` (the bound address, localhost names, loopback) plus `allowed_hosts`
    bind_host: str | None = None
    allowed_hosts: list[str] = field(default_factory=list)
    body_timeout_s: float = 60.0  # longest wait for each piece of a request body (408)

    @property
    def lease_renew_every_s(self) -> float:
        """How often a launcher renews its lease (told in each lease answer): four times a
        timeout, so one or two lost renewals never record a live job `lost`."""
        return max(0.2, self.lease_timeout_s / 4)

    @property
    def lease_sweep_every_s(self) -> float:
        """How often the service looks for expired leases: as often as launchers renew,
        at most every 5 s, so a dead job is recorded `lost` within timeout + 5 s."""
        return min(5.0, self.lease_renew_every_s)

    @property
    def analysis_budget(self) -> AnalysisBudget:
        return AnalysisBudget(self.analysis_cpu_seconds, self.analysis_max_kept)

    def __post_init__(self) -> None:
        home = Path(os.environ.get("RELAUNCH_HOME", Path.home() / ".relaunch"))
        if self.data_dir is None:
            self.data_dir = home / "service"
        self.allowed_roots = [Path(os.path.realpath(r)) for r in self.allowed_roots]
        if self.analysis_hold is None:
            from relaunch.attribution.service.hold import from_environment

            self.analysis_hold = from_environment()
