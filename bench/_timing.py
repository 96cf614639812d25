"""Timing helper shared by the benchmarks: the median wall time of repeated calls."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def timed_median(fn: Callable[[], Any], repeat: int) -> float:
    """Call `fn` `repeat` times; return the median wall time in seconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
