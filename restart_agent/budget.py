"""The per-analysis budget: how much CPU time and kept evidence one log's scan may use.

A log can be made to cost far more than its size suggests (every line a distinct error
line, issue 26); the scan's speed bounds the usual case, the budget bounds every case.
`LogScanner` checks it between pieces of at most `STEP` bytes:

- `cpu_seconds`: CPU time the scan has spent in this thread (`time.thread_time`, summed
  over `feed` calls, so a loaded machine or a slow writer does not count against it);
- `max_kept`: evidence lines kept (roots, cascade evidence, diagnostics): the memory the
  scan's result holds.

When either is reached the scanner reads no more: the verdict is made on what was read,
`CycleEvidence.budget` says which limit and how far the scan got, the verdict carries it as
`scan.budget` and its basis ends with `budget_note`. It is never an exception. Defaults:
`DEFAULT_CPU_SECONDS` and `DEFAULT_MAX_KEPT`, overridden by $RELAUNCH_ANALYSIS_CPU_SECONDS and
$RELAUNCH_ANALYSIS_MAX_KEPT (0: no limit), and by `relaunch analyze --budget-cpu-seconds /
--budget-kept-lines` and the service's settings of the same names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

DEFAULT_CPU_SECONDS = 120.0  # at >= 50,000 distinct error lines/s: millions of lines
# every evidence list of restart_agent.lines full (MAX_ROOTS + MAX_CASCADE_EVIDENCE +
# MAX_DIAGNOSTICS): nothing more could be kept; lower it to bound the memory further
DEFAULT_MAX_KEPT = 4096 + 4096 + 64
CPU_ENV = "RELAUNCH_ANALYSIS_CPU_SECONDS"
KEPT_ENV = "RELAUNCH_ANALYSIS_MAX_KEPT"
STEP = 1 << 20  # the budget is checked at least once per this many bytes fed


@dataclass(frozen=True)
class AnalysisBudget:
    """Limits of one analysis; None: no limit of that kind."""

    cpu_seconds: float | None = DEFAULT_CPU_SECONDS
    max_kept: int | None = DEFAULT_MAX_KEPT

    def __post_init__(self) -> None:
        if self.cpu_seconds is not None and not self.cpu_seconds > 0:
            raise ValueError(f"cpu_seconds must be positive, not {self.cpu_seconds!r}")
        if self.max_kept is not None and self.max_kept <= 0:
            raise ValueError(f"max_kept must be positive, not {self.max_kept!r}")

    @classmethod
    def unlimited(cls) -> AnalysisBudget:
        return cls(None, None)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> AnalysisBudget:
        """The defaults, with $RELAUNCH_ANALYSIS_CPU_SECONDS / $RELAUNCH_ANALYSIS_MAX_KEPT
        where set (0: no limit). A value that is not a number raises ValueError naming it."""
        env = os.environ if environ is None else environ
        cpu: float | None = DEFAULT_CPU_SECONDS
        kept: int | None = DEFAULT_MAX_KEPT
        if (raw := env.get(CPU_ENV, "").strip()) != "":
            cpu = _number(CPU_ENV, raw, float)
            cpu = cpu if cpu > 0 else None
        if (raw := env.get(KEPT_ENV, "").strip()) != "":
            kept = int(_number(KEPT_ENV, raw, int))
            kept = kept if kept > 0 else None
        return cls(cpu, kept)


def _number(name: str, raw: str, kind: type[float] | type[int]) -> float:
    try:
        value = kind(raw)
    except ValueError:
        raise ValueError(f"${name} is not a number: {raw!r}") from None
    if value != value or value < 0:  # NaN or negative
        raise ValueError(f"${name} must be 0 (no limit) or positive, not {raw!r}")
    return value


def reached(limit: str, value: float, bytes_read: int, lines_read: int) -> dict[str, Any]:
    """`CycleEvidence.budget` (and the verdict's `scan.budget`) for a reached limit."""
    return {
        "reached": limit,  # "cpu_seconds" or "max_kept"
        "limit": value,
        "bytes_read": bytes_read,
        "lines_read": lines_read,
    }


def budget_note(budget: dict[str, Any] | None) -> str:
    """The sentence a verdict's basis ends with when its scan stopped at the budget."""
    if not budget:
        return ""
    what = {
        "cpu_seconds": f"{budget['limit']:g} CPU seconds",
        "max_kept": f"{budget['limit']} kept evidence lines",
    }.get(budget["reached"], str(budget["reached"]))
    return (
        f" Analysis budget reached ({what}): the verdict is made on the first"
        f" {budget['bytes_read']} bytes ({budget['lines_read']} lines) of the log; the rest"
        " was not read."
    )
