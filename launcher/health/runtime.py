"""The agent's side of node health beyond the preflight: one object the agent calls.

Owns, for one `relaunch run`: this node's id (`--ft-node-id`, default the hostname), the
check groups sent to the nvhcd service, the run-time `HealthMonitor` of each cycle
(`--ft-node-health-check-interval`; NIC links chosen once, at the launcher's start), and
the exclusion file (`--ft-exclusion-file`): `excluded()` before each rendezvous (fails
open with a warning) and `publish()` when this node fails its own check.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from relaunch.launcher.health.exclusion_file import (
    ExclusionFileError,
    append_exclusion,
    read_exclusions,
)
from relaunch.launcher.health.monitor import (
    Check,
    HealthMonitor,
    checks_from_settings,
    parse_groups,
)
from relaunch.launcher.health.report import CheckResult, HealthReport

EXCLUSION_CHECK = "exclusion_file"


class RuntimeHealth:
    def __init__(
        self, settings: Any, say: Callable[[str], None], event: Callable[[str], None]
    ) -> None:
        self.settings = settings
        self._say = say
        self._event = event
        self.node_id = settings.ft_node_id or socket.gethostname()
        self.groups = parse_groups(settings.ft_node_health_check_groups)
        self.interval_s = float(settings.ft_node_health_check_interval or 0.0)
        self._checks: list[tuple[str, Check]] = []
        self._monitor: HealthMonitor | None = None
        self._not_started: str | None = None  # why no check runs (for the first cycle log)
        if self.interval_s > 0:
            self._checks, lines = checks_from_settings(settings)
            what = "; ".join(lines) if lines else "no check configured"
            if self._checks:  # the one console line; silent when nothing would run
                say(f"node health during the run: every {self.interval_s:g} s: {what}")
            else:
                self._not_started = f"node health during the run: not started: {what}"

    # -- during the run ------------------------------------------------------------------
    def start_cycle(self) -> None:
        """Start this cycle's monitor (nothing when the interval is 0 or no check runs)."""
        self.stop_cycle()
        if self._not_started is not None:  # said once, in the first cycle's log
            self._event(self._not_started)
            self._not_started = None
        if self.interval_s <= 0 or not self._checks:
            return
        self._monitor = HealthMonitor(
            self._checks, self.interval_s, node=self.node_id, on_round=self._on_round
        )
        self._monitor.start()

    def _on_round(self, number: int, report: HealthReport) -> None:
        if number == 1 and report.healthy:
            states = ", ".join(f"{c.name} {c.status}" for c in report.checks)
            self._event(f"node health during the run: first round: {report.reason} ({states})")

    def unhealthy(self) -> HealthReport | None:
        monitor = self._monitor
        return monitor.unhealthy if monitor is not None else None

    def stop_cycle(self, wait_s: float = 0.0) -> None:
        """Stop this cycle's monitor. By default without waiting for a round in progress
        (an NVLink window or a slow service must not delay the restart); its result is
        discarded."""
        monitor, self._monitor = self._monitor, None
        if monitor is not None:
            monitor.stop(timeout=wait_s)

    # -- the exclusion file ----------------------------------------------------------------
    def excluded(self) -> HealthReport | None:
        """A failed report when the exclusion file lists this node; None otherwise, also
        when the file is missing or unusable (a console warning says so)."""
        path = self.settings.ft_exclusion_file
        if not path:
            return None
        try:
            entry = read_exclusions(path).find(self.node_id)
        except FileNotFoundError:
            self._say(f"warning: exclusion file {path} not found; failing open (joining)")
            return None
        except ExclusionFileError as exc:
            self._say(f"warning: exclusion file {path} unusable ({exc}); failing open (joining)")
            return None
        if entry is None:
            return None
        why = str(entry.get("reason") or "no reason given")
        check = CheckResult(
            EXCLUSION_CHECK, "fail", f"node {self.node_id} listed in {path}: {why}", entry
        )
        return HealthReport.from_checks([check], node=self.node_id)

    def publish(self, report: HealthReport) -> None:
        """Append this node to the exclusion file (when one is configured)."""
        path = self.settings.ft_exclusion_file
        if not path:
            return
        try:
            added = append_exclusion(
                path, self.node_id, report.reason[:2000], job_id=self.settings.job_id
            )
        except (OSError, ExclusionFileError) as exc:
            self._say(f"warning: node {self.node_id} not added to exclusion file {path}: {exc}")
            return
        if added:
            self._say(f"node {self.node_id} added to exclusion file {path}")
