"""`LaunchResult`: what one `launcher.agent.launch()` call ended with.

The exit code (docs/launcher.md), the final state this node recorded in the history, and
the verdict of each cycle as the launcher received it, so callers (`relaunch run`,
`relaunch demo`, tests) read the outcome instead of reaching into the agent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from relaunch.launcher.attribution_client import VerdictInfo


@dataclass(frozen=True)
class LaunchResult:
    exit_code: int
    # the job's final state as this node recorded it (None: this node did not end the
    # job, e.g. it left an elastic job unhealthy, or it never started an agent)
    job_state: str | None = None
    reason: str | None = None
    verdicts: dict[int, VerdictInfo] = field(default_factory=dict)  # per cycle, received

    @property
    def decisions(self) -> list[str]:
        """The decisions in cycle order ("RESTART", ..., "STOP")."""
        return [self.verdicts[c].decision for c in sorted(self.verdicts)]
