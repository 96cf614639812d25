"""NVLink error counters judged across the run-time monitor's rounds, not only within one.

Each round's GPU check samples the counters over a short window (`nvml.py`); a link that
gains an error every few seconds looks flat inside that window. `CounterWindow` keeps the
last sample of each of the last `rounds` rounds per GPU and flags persistent growth across
them (`growth.counter_growth`: rising in at least `min_growing_intervals` intervals; one
transient change and counter resets are ignored). Pure: fed snapshots, returns checks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from relaunch.launcher.health.growth import growth_by_key, persistent_keys
from relaunch.launcher.health.nvml import GpuSnapshot
from relaunch.launcher.health.report import CheckResult


class CounterWindow:
    def __init__(self, rounds: int = 4, *, min_growing_intervals: int = 2) -> None:
        if rounds < min_growing_intervals + 1:
            raise ValueError("the window needs more rounds than growing intervals")
        self.rounds = rounds
        self.min_growing_intervals = min_growing_intervals
        self._history: dict[str, deque[dict[str, int | None]]] = {}

    def add(self, snaps: Sequence[GpuSnapshot]) -> list[CheckResult]:
        """Record this round's counters; one check per GPU with NVLink counters."""
        out: list[CheckResult] = []
        for snap in snaps:
            if snap.lost or not snap.nvlink_samples:
                continue
            key = snap.uuid or f"gpu{snap.index}"
            hist = self._history.setdefault(key, deque(maxlen=self.rounds))
            hist.append(dict(snap.nvlink_samples[-1]))
            name = f"gpu{snap.index}.nvlink_errors_rounds"
            if len(hist) < self.min_growing_intervals + 1:
                out.append(CheckResult(name, "ok", f"{len(hist)} round(s) sampled so far"))
                continue
            verdicts = growth_by_key(list(hist), min_growing_intervals=self.min_growing_intervals)
            growing = persistent_keys(verdicts)
            data = {
                "rounds": len(hist),
                "counters": {k: v.to_dict() for k, v in verdicts.items() if v.total_growth},
            }
            if growing:
                detail = f"NVLink error counters grew over {len(hist)} rounds: {', '.join(growing)}"
                out.append(CheckResult(name, "fail", detail, data))
            else:
                out.append(CheckResult(name, "ok", "", data))
        return out
