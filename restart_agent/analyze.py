"""`analyze_file`: scan one cycle log and decide, timing the scan."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from relaunch.restart_agent.model import PolicyConfig, PriorCycle, Verdict
from relaunch.restart_agent.policy import decide
from relaunch.restart_agent.scanner import scan_file


def analyze_file(
    path: str | os.PathLike[str],
    history: Sequence[PriorCycle] = (),
    config: PolicyConfig = PolicyConfig(),  # noqa: B008 - frozen dataclass, safe default
    fr_culprit_ranks: Sequence[int] | None = None,
) -> Verdict:
    """Scan `path` and return the verdict; OS errors (missing, unreadable) propagate."""
    t0 = time.perf_counter()
    evidence = scan_file(path)
    seconds = time.perf_counter() - t0
    verdict = decide(evidence, history, config, fr_culprit_ranks)
    verdict.scan = verdict.scan.timed(seconds)
    return verdict
