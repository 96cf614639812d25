"""The verdict policy's thresholds as user options: one table, one builder.

`relaunch run` (flags `--ft-*`, YAML keys) and `relaunch serve` (the same names without
`ft-`) read the thresholds of `restart_agent.model.PolicyConfig` from this table. The bounds
and types are the restart agent's own (`restart_agent.model.POLICY_LIMITS`) and the
`PolicyConfig` is built by `PolicyConfig.from_mapping`, so a flag, a YAML key, a serve option
and a mapping given to the agent are checked by the same rule. NVRx's spelling
`--ft-max-no-progress-cycles` (0 or -1: no ceiling) is `relaunch run`'s alone
(`launcher.config`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from relaunch.restart_agent.model import POLICY_LIMITS, PolicyConfig

MAX_VALUE = int(POLICY_LIMITS["job_no_progress_ceiling"][2])


@dataclass(frozen=True)
class PolicyOption:
    name: str  # flag without its prefix: `max-no-progress-restarts` (run: --ft-NAME)
    field: str  # PolicyConfig field
    help: str

    @property
    def dest(self) -> str:
        return "ft_" + self.name.replace("-", "_")

    def default(self) -> int | float:
        return getattr(PolicyConfig(), self.field)

    def bounds(self) -> str:
        typ, lo, hi = POLICY_LIMITS[self.field]
        return f"{lo:g}-{hi:g}"

    def parse(self, text: Any) -> int | float:
        """The option's value from a flag string or a YAML scalar; ValueError says why."""
        typ, lo, hi = POLICY_LIMITS[self.field]
        kind = "an integer" if typ is int else "a number"
        if isinstance(text, bool):
            raise ValueError(f"must be {kind}")
        try:
            value = typ(str(text).strip())
        except ValueError:
            raise ValueError(f"must be {kind}") from None
        if value != value or not lo <= value <= hi:
            raise ValueError(f"must be between {lo:g} and {hi:g}")
        return value


POLICY_OPTIONS: tuple[PolicyOption, ...] = (
    PolicyOption(
        "max-no-progress-restarts",
        "job_no_progress_ceiling",
        "STOP after this many consecutive failed cycles without progress, whatever the cause",
    ),
    PolicyOption(
        "same-root-retries",
        "same_root_no_progress_retries",
        "STOP when the same root failure recurred this many times without progress",
    ),
    PolicyOption(
        "workload-recurrence-stop",
        "workload_recurrence_stop",
        "STOP a workload bug after this many identical recurrences without progress",
    ),
    PolicyOption(
        "startup-window",
        "startup_window_s",
        "seconds: a cycle that ran longer than this without any progress report is not "
        "counted as a startup failure (its progress is unknown)",
    ),
)


def bounded_int(text: Any) -> int:
    """A ceiling-like integer within 1..MAX_VALUE (NVRx spellings). Raises ValueError."""
    return int(POLICY_OPTIONS[0].parse(text))


def build_policy(values: Mapping[str, Any]) -> PolicyConfig:
    """`PolicyConfig` from {option dest (`ft_same_root_retries`) or field name: value}.

    Missing options keep the restart agent's defaults. Raises ValueError naming the option.
    """
    fields: dict[str, int | float] = {}
    for opt in POLICY_OPTIONS:
        for key in (opt.dest, opt.field):
            if key in values and values[key] is not None:
                try:
                    fields[opt.field] = opt.parse(values[key])
                except ValueError as exc:
                    raise ValueError(f"--ft-{opt.name} {values[key]!r}: {exc}") from None
    return PolicyConfig.from_mapping(fields)
