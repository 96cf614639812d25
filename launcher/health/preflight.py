"""`preflight(...)`: the node-health check the launcher runs before each rendezvous.

Combines the GPU checks (NVML) and the optional external node-health service into one
`HealthReport`. Fails open: only an explicit failed check makes the node unhealthy; a
missing driver, an unreachable service or a check that crashes is recorded and ignored.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Sequence

from relaunch.launcher.health.external import DEFAULT_TIMEOUT_S, external_check, normalize_endpoint
from relaunch.launcher.health.nvml import NvmlOptions, gpu_checks
from relaunch.launcher.health.report import CheckResult, HealthReport

log = logging.getLogger(__name__)


def preflight(
    *,
    gpu: bool = True,
    endpoint: str | None = None,
    endpoint_timeout_s: float = DEFAULT_TIMEOUT_S,
    endpoint_args: Sequence[str] = (),
    nvml_options: NvmlOptions | None = None,
    node: str | None = None,
) -> HealthReport:
    """Check this node. `endpoint` is `--ft-node-health-check-endpoint` (None: no service).

    Never raises: every problem fails open and is recorded as an `error` check. A
    malformed endpoint is such an error here; validate it at startup with
    `launcher.health.external.normalize_endpoint` to report it to the user instead.
    """
    started = time.monotonic()
    checks: list[CheckResult] = []
    endpoint_ok = True
    if endpoint is not None:
        try:
            normalize_endpoint(endpoint)
        except ValueError as exc:
            endpoint_ok = False
            log.warning("node health endpoint ignored: %s", exc)
            checks.append(
                CheckResult("external_service", "error", str(exc), {"endpoint": endpoint})
            )
    if gpu:
        try:
            checks.extend(gpu_checks(nvml_options or NvmlOptions()))
        except Exception as exc:  # a broken check never fails the node
            log.warning("GPU health check crashed: %s", exc, exc_info=True)
            checks.append(CheckResult("nvml", "error", f"GPU health check crashed: {exc}"))
    if endpoint is not None and endpoint_ok:
        try:
            checks.append(
                external_check(endpoint, timeout_s=endpoint_timeout_s, args=endpoint_args)
            )
        except Exception as exc:  # noqa: BLE001 - e.g. a bad timeout: fail open, recorded
            log.warning("external health check not run: %s", exc)
            checks.append(CheckResult("external_service", "error", f"not run: {exc}"))
    report = HealthReport.from_checks(
        checks, node=node or socket.gethostname(), duration_s=time.monotonic() - started
    )
    if not report.healthy:
        log.warning("node %s unhealthy: %s", report.node, report.reason)
    return report
