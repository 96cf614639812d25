"""Node health before each rendezvous: GPU checks via NVML and an external gRPC service.

Public API: `preflight(...) -> HealthReport` (fields `healthy`, `checks`, `reason`,
`to_dict()`), `CheckResult`, `NvmlOptions`, the pure `counter_growth` / `growth_by_key`
the `ExternalHealthClient`, and `exclusion_record` / `write_record` (what a node left
out of the next cycle records). See docs/node_health.md.
"""

from relaunch.launcher.health.exclusion import exclusion_record, write_record
from relaunch.launcher.health.growth import GrowthVerdict, counter_growth, growth_by_key
from relaunch.launcher.health.nvml import NvmlOptions, gpu_checks, nvml_probe
from relaunch.launcher.health.preflight import preflight
from relaunch.launcher.health.report import CheckResult, HealthReport

__all__ = [
    "CheckResult",
    "GrowthVerdict",
    "HealthReport",
    "NvmlOptions",
    "counter_growth",
    "exclusion_record",
    "gpu_checks",
    "growth_by_key",
    "nvml_probe",
    "preflight",
    "write_record",
]
