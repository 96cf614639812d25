"""Node health before each rendezvous: GPU checks via NVML and an external gRPC service.

Public API: `preflight(...) -> HealthReport` (fields `healthy`, `checks`, `reason`,
`to_dict()`), `CheckResult`, `NvmlOptions`, the pure `counter_growth` / `growth_by_key`
and the `ExternalHealthClient`. See docs/node_health.md.
"""

from launcher.health.growth import GrowthVerdict, counter_growth, growth_by_key
from launcher.health.nvml import NvmlOptions, gpu_checks, nvml_probe
from launcher.health.preflight import preflight
from launcher.health.report import CheckResult, HealthReport

__all__ = [
    "CheckResult",
    "GrowthVerdict",
    "HealthReport",
    "NvmlOptions",
    "counter_growth",
    "gpu_checks",
    "growth_by_key",
    "nvml_probe",
    "preflight",
]
