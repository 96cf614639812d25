"""Node health while the workers run: the checks again every `--ft-node-health-check-interval`.

`HealthMonitor` is a thread started with each cycle's workers and stopped at the cycle's
end. Each round runs its checks (GPU through NVML with an NVLink error-counter window, NIC
link state, a storage probe, the external nvhcd service with its check groups) and builds
a `HealthReport`. The first unhealthy report is kept (`unhealthy`) and the thread ends:
the agent's monitor loop then stops the workers and the node leaves exactly as after a
failed preflight. Checks fail open as in the preflight: only an explicit `fail` counts.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from relaunch.launcher.health.report import CheckResult, HealthReport

log = logging.getLogger(__name__)

Check = Callable[[], list[CheckResult]]
DEFAULT_GROUPS = ("prolog", "epilog", "logs", "gpu")


def parse_groups(text: str) -> tuple[str, ...]:
    """`prolog,epilog` -> ("prolog", "epilog"); ValueError on an empty list or name."""
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or any(not p for p in parts):
        raise ValueError("expected comma-separated check group names, e.g. prolog,epilog,logs,gpu")
    return tuple(parts)


class HealthMonitor:
    """Runs `checks` now and then every `interval_s` until stopped or unhealthy."""

    def __init__(
        self,
        checks: Sequence[tuple[str, Check]],
        interval_s: float,
        *,
        node: str | None = None,
        on_round: Callable[[int, HealthReport], None] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("health check interval must be > 0 seconds")
        self.checks = list(checks)
        self.interval_s = interval_s
        self.node = node or socket.gethostname()
        self._on_round = on_round
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._unhealthy: HealthReport | None = None
        self.rounds = 0

    @property
    def unhealthy(self) -> HealthReport | None:
        """The first unhealthy report (None: healthy so far)."""
        with self._lock:
            return self._unhealthy

    def run_round(self) -> HealthReport:
        """One round of every check (never raises; a crashing check is an `error`)."""
        started = time.monotonic()
        results: list[CheckResult] = []
        for name, check in self.checks:
            try:
                results.extend(check())
            except Exception as exc:  # a broken check never fails the node
                log.warning("health check %s crashed: %s", name, exc, exc_info=True)
                results.append(CheckResult(name, "error", f"check crashed: {exc}"))
        report = HealthReport.from_checks(
            results, node=self.node, duration_s=time.monotonic() - started
        )
        self.rounds += 1
        if self._stop.is_set():  # stopped while the round ran: its cycle is over
            return report
        if not report.healthy:
            with self._lock:
                if self._unhealthy is None:
                    self._unhealthy = report
        if self._on_round is not None:
            try:
                self._on_round(self.rounds, report)
            except Exception:  # a logging hook never stops the monitor
                log.warning("health monitor callback failed", exc_info=True)
        return report

    def _loop(self) -> None:
        while not self._stop.is_set():
            report = self.run_round()
            if not report.healthy:
                return
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("health monitor already started")
        self._thread = threading.Thread(target=self._loop, name="relaunch-health", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Ask the thread to end; wait for the round in progress at most `timeout` seconds
        (0: do not wait; a round finishing later is discarded)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread() and timeout != 0:
            thread.join(timeout)


def gpu_round_check(window_s: float, rounds: int = 4) -> Check:
    """The preflight's GPU checks on a `window_s` sampling window, plus NVLink counter
    growth across the last `rounds` rounds (`nvlink_window.CounterWindow`)."""
    from relaunch.launcher.health.nvlink_window import CounterWindow
    from relaunch.launcher.health.nvml import NvmlOptions, collect_snapshots, evaluate_snapshots

    options = NvmlOptions(window_s=window_s, samples=3)
    across = CounterWindow(rounds)

    def check() -> list[CheckResult]:
        collected = collect_snapshots(options)
        if isinstance(collected, CheckResult):
            return [collected]
        return evaluate_snapshots(collected, options) + across.add(collected)

    return check


def checks_from_settings(settings: Any) -> tuple[list[tuple[str, Check]], list[str]]:
    """The run-time checks `relaunch run`'s settings ask for, and one line per check
    saying what it watches (or why it is skipped). Raises ValueError on a bad NIC name."""
    checks: list[tuple[str, Check]] = []
    lines: list[str] = []
    if settings.ft_gpu_health != "off":
        from relaunch.launcher.health.nvml import nvml_probe

        probe = nvml_probe()
        if probe.status == "ok":
            window = min(1.0, settings.ft_node_health_check_interval)
            checks.append(("nvml", gpu_round_check(window)))
            lines.append(
                f"GPU (NVML; NVLink counters over {window:g} s and over the last rounds): "
                + probe.detail
            )
        else:
            lines.append(f"GPU checks skipped: {probe.detail or probe.status}")
    if settings.ft_enable_nic_healthcheck or settings.ft_nic_interfaces:
        from relaunch.launcher.health.nic import NicCheck

        names = [n for n in settings.ft_nic_interfaces.split(",") if n.strip()]
        try:
            nic = NicCheck(names or None)
        except ValueError as exc:  # a NIC gone since the options were checked: fail open
            lines.append(f"NIC check skipped: {exc}")
        else:
            checks.append(("nic_link", nic))
            watched = ", ".join(link.label for link in nic.links) or "none up at start"
            lines.append(f"NIC links: {watched}")
    if settings.ft_storage_healthcheck_path:
        from relaunch.launcher.health.storage import StorageCheck

        storage = StorageCheck(
            settings.ft_storage_healthcheck_path,
            timeout_s=settings.ft_storage_healthcheck_timeout,
        )
        checks.append(("storage", storage))
        lines.append(f"storage: {storage.path} within {storage.timeout_s:g} s (write+fsync+read)")
    endpoint = settings.ft_node_health_check_endpoint or None
    if endpoint is not None:
        from relaunch.launcher.health.external import external_check

        groups = parse_groups(settings.ft_node_health_check_groups)
        checks.append(("external_service", lambda: [external_check(endpoint, args=groups)]))
        lines.append(f"health service {endpoint} (groups {','.join(groups)})")
    return checks, lines
