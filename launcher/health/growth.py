"""Counter growth over a sampling window: flag persistent growth, ignore a transient change.

Pure functions over sequences of counter samples (NVLink replay/recovery/CRC counters, or
any monotonically increasing error counter). A counter that moves once and then stays flat
is a transient event and is ignored; a counter that keeps rising across the window is a
link going bad and is flagged. A decrease is a counter reset (driver reload, wrap) and is
not growth.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class GrowthVerdict:
    """What one counter did across the window."""

    persistent: bool
    growing_intervals: int
    intervals: int
    total_growth: int

    def to_dict(self) -> dict[str, int | bool]:
        return {
            "persistent": self.persistent,
            "growing_intervals": self.growing_intervals,
            "intervals": self.intervals,
            "total_growth": self.total_growth,
        }


def counter_growth(
    samples: Sequence[int | None], *, min_growing_intervals: int = 2, min_total_growth: int = 1
) -> GrowthVerdict:
    """Judge one counter from samples taken at equal intervals, oldest first.

    Persistent growth means the counter rose in at least `min_growing_intervals` of the
    intervals between consecutive samples and by at least `min_total_growth` overall.
    A `None` sample (read failed) breaks the sequence: intervals touching it are skipped.
    """
    if min_growing_intervals < 1:
        raise ValueError("min_growing_intervals must be >= 1")
    growing = 0
    intervals = 0
    total = 0
    for prev, cur in zip(samples, samples[1:], strict=False):
        if prev is None or cur is None:
            continue
        intervals += 1
        delta = int(cur) - int(prev)
        if delta > 0:
            growing += 1
            total += delta
    persistent = growing >= min_growing_intervals and total >= min_total_growth
    return GrowthVerdict(persistent, growing, intervals, total)


def growth_by_key(
    samples: Sequence[Mapping[K, int | None]],
    *,
    min_growing_intervals: int = 2,
    min_total_growth: int = 1,
) -> dict[K, GrowthVerdict]:
    """Apply `counter_growth` to every key seen in a sequence of snapshots.

    A key missing from a snapshot counts as a failed read (`None`) for that snapshot.
    """
    keys: list[K] = []
    seen: set[K] = set()
    for snap in samples:
        for key in snap:
            if key not in seen:
                seen.add(key)
                keys.append(key)
    return {
        key: counter_growth(
            [snap.get(key) for snap in samples],
            min_growing_intervals=min_growing_intervals,
            min_total_growth=min_total_growth,
        )
        for key in keys
    }


def persistent_keys(verdicts: Mapping[K, GrowthVerdict]) -> list[K]:
    """The keys whose counters grew persistently, in input order."""
    return [key for key, verdict in verdicts.items() if verdict.persistent]
