"""The verdict policy's thresholds as user options: one table, one builder.

`relaunch run` (flags `--ft-*`, YAML keys) and `relaunch serve` (the same names without
`ft-`) read the thresholds of `restart_agent.model.PolicyConfig` from this table, so both
check the same bounds and build the `PolicyConfig` the same way (`build_policy`). A
threshold whose `PolicyConfig` field does not exist in this version of the restart agent
is refused by `build_policy` with a clear error rather than silently dropped. NVRx's spelling
`--ft-max-no-progress-cycles` (0 or -1: no ceiling) is `relaunch run`'s alone
(`launcher.config`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from restart_agent.model import PolicyConfig

MIN_VALUE, MAX_VALUE = 0, 1000


@dataclass(frozen=True)
class PolicyOption:
    name: str  # flag without dashes' prefix: `max-no-progress-restarts` (run: --ft-NAME)
    field: str  # PolicyConfig field
    help: str

    @property
    def dest(self) -> str:
        return "ft_" + self.name.replace("-", "_")

    def default(self) -> int:
        return int(getattr(PolicyConfig(), self.field))


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
)


def bounded_int(text: Any) -> int:
    """A threshold: an integer within 0..1000. Raises ValueError with the reason."""
    if isinstance(text, bool):
        raise ValueError("must be an integer")
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ValueError("must be an integer") from None
    if not MIN_VALUE <= value <= MAX_VALUE:
        raise ValueError(f"must be between {MIN_VALUE} and {MAX_VALUE}")
    return value


def build_policy(values: Mapping[str, Any]) -> PolicyConfig:
    """`PolicyConfig` from {option dest (`ft_same_root_retries`) or field name: value}.

    Missing options keep the restart agent's defaults; values are checked with
    `bounded_int`. Raises ValueError naming the option.
    """
    known = {f.name for f in dataclasses.fields(PolicyConfig)}
    kwargs: dict[str, int] = {}
    for opt in POLICY_OPTIONS:
        for key in (opt.dest, opt.field):
            if key in values and values[key] is not None:
                try:
                    kwargs[opt.field] = bounded_int(values[key])
                except ValueError as exc:
                    raise ValueError(f"--ft-{opt.name} {values[key]!r}: {exc}") from None
    for name in kwargs:
        if name not in known:  # pragma: no cover - only if the restart agent drops a field
            raise ValueError(f"the restart agent has no policy threshold {name!r}")
    return dataclasses.replace(PolicyConfig(), **kwargs)
