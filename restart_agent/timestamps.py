"""A cycle's duration from the log's own timestamps, when the launcher gives none.

The formats are data (`timestamps` in taxonomy.yaml: Python logging / torch elastic /
DeepSpeed / Slurm ISO dates, glog's `E1203 10:00:00.123` of torch's C++ logs and NCCL's
watchdog). `span_s(head, tail)` reads every timestamp of the log's first and last bytes (the
scanner keeps 64 KiB of each) and gives the largest span between the earliest and the latest
timestamp of one format, in seconds, or None when no format has two timestamps. A format
without a year (glog) that goes backwards (a new year) gives no span; an absurd one (over
`MAX_SPAN_S`) none either.
"""

from __future__ import annotations

import functools
import re
from datetime import datetime

from relaunch.restart_agent.registry import RegistryError, _load_yaml
from relaunch.restart_agent.taxonomy import TAXONOMY_FILE

KEEP = 1 << 16  # bytes of the log's head and tail that the scanner keeps for this
MAX_SPAN_S = 1e7
MAX_STAMPS = 4096  # per format and side: a bound on the work, whatever the log
_GROUPS = {"month", "day", "hour", "minute", "second"}


@functools.lru_cache(maxsize=1)
def formats() -> tuple[tuple[str, re.Pattern[bytes]], ...]:
    rows = _load_yaml(TAXONOMY_FILE).get("timestamps") or []
    out = []
    for row in rows if isinstance(rows, list) else [None]:
        if not isinstance(row, dict) or not isinstance(row.get("regex"), str):
            raise RegistryError(f"{TAXONOMY_FILE}: timestamps rows need name and regex")
        try:
            rx = re.compile(row["regex"].encode(), re.MULTILINE)
        except re.error as exc:
            raise RegistryError(f"{TAXONOMY_FILE}: timestamps {row.get('name')}: {exc}") from exc
        if not set(rx.groupindex) >= _GROUPS:
            raise RegistryError(f"{TAXONOMY_FILE}: timestamps {row.get('name')}: needs {_GROUPS}")
        out.append((str(row.get("name")), rx))
    return tuple(out)


def _stamps(rx: re.Pattern[bytes], data: bytes) -> list[float]:
    out = []
    for m in rx.finditer(data):
        g = m.groupdict()
        try:
            t = datetime(
                int(g.get("year") or 2000),  # a leap year: glog's Feb 29 parses
                int(g["month"]),
                int(g["day"]),
                int(g["hour"]),
                int(g["minute"]),
                min(int(g["second"]), 59),
            )
        except ValueError:
            continue  # not a date after all
        out.append(t.timestamp())
        if len(out) >= MAX_STAMPS:
            break
    return out


def span_s(head: bytes, tail: bytes) -> float | None:
    """Largest span (seconds) of one timestamp format over the log's head and tail."""
    best: float | None = None
    for _, rx in formats():
        same = tail == head  # a short log: both are the whole of it
        first = _stamps(rx, head)
        last = first if same else _stamps(rx, tail)
        stamps = first if same else first + last
        if len(stamps) < 2:
            continue
        span = max(stamps) - min(stamps)
        if first and last and last[-1] < first[0]:
            continue  # went backwards (glog across a new year): no span
        if 0 <= span <= MAX_SPAN_S and (best is None or span > best):
            best = span
    return best
