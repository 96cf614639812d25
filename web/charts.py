"""Server-side chart layouts of the job page: coordinates only, drawn by `_charts.html` as SVG.

Pure functions over the timeline rows of `views.cycle_row` (plus `now`, for a cycle still
running): no I/O, no markup, no JavaScript, nothing fetched at view time.

- `cycle_timeline(rows, now)` — each cycle as a bar on a real time axis (its run time),
  the gaps between cycles as downtime, coloured by verdict;
- `goodput(rows, now)` — the fraction of wall time spent in cycles that advanced training
  past the best iteration reached before, with the run time that did not and the downtime;
- `iterations_chart(rows, now)` — the iteration reached over time;
- `failure_strip(rows)` — where each cycle's primary failure landed: rank × cycle and
  node × cycle heat strips.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

WIDTH = 960
PAD_LEFT = 70
PAD_RIGHT = 16
# steps of the time axis, seconds
_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
               43200, 86400, 172800, 604800)  # fmt: skip
MAX_STRIP_ROWS = 32
MAX_STRIP_COLUMNS = 240


def verdict_class(row: Mapping[str, Any]) -> str:
    """stop | restart | running | pending: the colour of a cycle."""
    decision = (row.get("decision") or "").lower()
    if decision in ("stop", "restart"):
        return decision
    return "running" if row.get("running") else "pending"


def _span(row: Mapping[str, Any], now: datetime) -> tuple[datetime, datetime] | None:
    start = row.get("started_at")
    if not isinstance(start, datetime):
        return None
    end = row.get("ended_at") or row.get("analysed_at")
    if not isinstance(end, datetime):
        end = now if row.get("running") else start
    return start, max(end, start)


def nice_ticks(lo: float, hi: float, count: int = 5, *, integer: bool = False) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2 or 5 times a power of ten apart);
    `integer`: whole numbers only (an iteration axis up to 3 must not label 0, 0, 1, 1)."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    if integer:
        step = max(step, 1)
    first = math.floor(lo / step) * step
    ticks, t = [], first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 10))
        t += step
    if ticks[-1] < hi:
        ticks.append(ticks[-1] + step)
    return ticks


def _time_label(t: datetime, step: int, span: float) -> str:
    if step >= 86400:
        return t.strftime("%m-%d")
    if span >= 86400:
        return t.strftime("%m-%d %H:%M")
    return t.strftime("%H:%M:%S") if step < 60 else t.strftime("%H:%M")


class TimeAxis:
    """A linear time scale from `t0` to `t1` over [x0, x1] pixels, with labelled ticks."""

    def __init__(self, t0: datetime, t1: datetime, x0: float, x1: float) -> None:
        if t1 <= t0:
            t1 = t0 + timedelta(seconds=1)
        self.t0, self.t1, self.x0, self.x1 = t0, t1, x0, x1
        self.span = (t1 - t0).total_seconds()

    def x(self, t: datetime) -> float:
        return round(self.x0 + (t - self.t0).total_seconds() / self.span * (self.x1 - self.x0), 1)

    def ticks(self, most: int = 8) -> list[dict[str, Any]]:
        step = next((s for s in _TIME_STEPS if self.span / s <= most), _TIME_STEPS[-1])
        epoch = self.t0.timestamp()
        first = math.ceil(epoch / step) * step
        out = []
        for k in range(most + 2):
            ts = first + k * step
            if ts > self.t1.timestamp():
                break
            t = datetime.fromtimestamp(ts, tz=self.t0.tzinfo)
            out.append({"x": self.x(t), "label": _time_label(t, step, self.span)})
        return out


def _window(rows: Sequence[Mapping[str, Any]], now: datetime) -> tuple[datetime, datetime] | None:
    spans = [s for s in (_span(r, now) for r in rows) if s is not None]
    if not spans:
        return None
    return min(s[0] for s in spans), max(s[1] for s in spans)


def cycle_timeline(rows: Sequence[Mapping[str, Any]], now: datetime) -> dict[str, Any] | None:
    """Bars (run time) and gaps (downtime) of the cycles on a time axis; None without times."""
    window = _window(rows, now)
    if window is None:
        return None
    height, top, bar_h = 96, 10, 34
    axis = TimeAxis(window[0], window[1], PAD_LEFT, WIDTH - PAD_RIGHT)
    bars, gaps = [], []
    prev_end: datetime | None = None
    for r in rows:
        span = _span(r, now)
        if span is None:
            continue
        start, end = span
        if prev_end is not None and start > prev_end:
            gx = axis.x(prev_end)
            gaps.append(
                {
                    "x": gx,
                    "w": max(axis.x(start) - gx, 0.5),
                    "title": f"downtime before cycle {r['cycle']}: "
                    f"{_dur((start - prev_end).total_seconds())}",
                }
            )
        x = axis.x(start)
        cls = verdict_class(r)
        bars.append(
            {
                "x": x,
                "w": max(axis.x(end) - x, 1.5),
                "cls": cls,
                "cycle": r.get("cycle"),
                "title": f"cycle {r.get('cycle')}: {cls.upper()}, ran "
                f"{_dur((end - start).total_seconds())}, {r.get('cause') or ''}",
            }
        )
        prev_end = max(prev_end, end) if prev_end else end
    return {
        "width": WIDTH,
        "height": height,
        "top": top,
        "bar_h": bar_h,
        "axis_y": top + bar_h + 8,
        "x0": PAD_LEFT,
        "x1": WIDTH - PAD_RIGHT,
        "ticks": axis.ticks(),
        "bars": bars,
        "gaps": gaps,
        "from": window[0].strftime("%Y-%m-%d %H:%M:%S UTC"),
        "to": window[1].strftime("%Y-%m-%d %H:%M:%S UTC"),
    }


def goodput(rows: Sequence[Mapping[str, Any]], now: datetime) -> dict[str, Any] | None:
    """Wall time from the first cycle's start to the last one's end (now while running),
    split into: run time of cycles that advanced past the best iteration reached before
    ("progressing"), run time of the other cycles, and downtime between cycles."""
    window = _window(rows, now)
    if window is None:
        return None
    wall = (window[1] - window[0]).total_seconds()
    best: int | None = None
    progressing = run = 0.0
    for r in rows:
        span = _span(r, now)
        if span is None:
            continue
        d = (span[1] - span[0]).total_seconds()
        run += d
        it = r.get("iteration")
        if isinstance(it, int) and (best is None or it > best):
            if best is not None or it > (r.get("first_iteration") or 0):
                progressing += d
            best = it
    run = min(run, wall) if wall > 0 else run
    down = max(wall - run, 0.0)
    stalled = max(run - progressing, 0.0)
    frac = progressing / wall if wall > 0 else None

    def pct(x: float) -> float:
        return round(100 * x / wall, 1) if wall > 0 else 0.0

    return {
        "fraction": frac,
        "percent": None if frac is None else round(100 * frac),
        "wall": _dur(wall),
        "progressing": _dur(progressing),
        "stalled": _dur(stalled),
        "down": _dur(down),
        "bar": [
            {"cls": "progressing", "pct": pct(progressing), "label": "advancing training"},
            {"cls": "stalled", "pct": pct(stalled), "label": "running, no new progress"},
            {"cls": "down", "pct": pct(down), "label": "down between cycles"},
        ],
    }


def iterations_chart(rows: Sequence[Mapping[str, Any]], now: datetime) -> dict[str, Any] | None:
    """Iteration reached over time: per cycle a segment from its start (at its first reported
    iteration, when known) to its end (at its last), and a point at the end. Histories
    without start times (cycles analysed after the fact) are drawn over the cycle number."""
    known = [r for r in rows if isinstance(r.get("iteration"), int) and r.get("cycle") is not None]
    if not known:
        return None
    height, top, bottom = 220, 12, 40
    x0, x1 = PAD_LEFT, WIDTH - PAD_RIGHT
    window = _window(rows, now)  # the cycle timeline's axis: the two charts line up
    timed = window is not None and all(_span(r, now) for r in known)
    y_ticks = nice_ticks(0, max(int(r["iteration"]) for r in known) or 1, integer=True)
    y_top = y_ticks[-1] or 1
    inner = height - top - bottom

    def y(v: float) -> float:
        return round(top + inner - v / y_top * inner, 1)

    if timed:
        axis = TimeAxis(window[0], window[1], x0, x1)  # type: ignore[index]
        ticks, x_title = axis.ticks(), "time (UTC)"
    else:
        c0 = min(int(r["cycle"]) for r in rows if r.get("cycle") is not None)
        c1 = max(int(r["cycle"]) for r in rows if r.get("cycle") is not None)
        width = max(c1 - c0, 1)

        def cx(c: int) -> float:
            return round(x0 + 12 + (c - c0) / width * (x1 - x0 - 24), 1)

        ticks = [{"x": cx(int(v)), "label": str(int(v))}
                 for v in nice_ticks(c0, c1, 8, integer=True) if c0 <= v <= c1]  # fmt: skip
        x_title = "cycle"

    points, segments = [], []
    for r in known:
        it, cls = int(r["iteration"]), verdict_class(r)
        if timed:
            start, end = _span(r, now)  # type: ignore[misc]
            px = axis.x(end)
            first = r.get("first_iteration")
            if isinstance(first, int) and first <= it:
                segments.append({"x1": axis.x(start), "y1": y(first), "x2": px, "y2": y(it)})
        else:
            px = cx(int(r["cycle"]))
        points.append(
            {
                "x": px,
                "y": y(it),
                "cls": cls,
                "title": f"cycle {r.get('cycle')}: iteration {it} ({cls.upper()})",
            }
        )
    return {
        "width": WIDTH,
        "height": height,
        "top": top,
        "bottom": height - bottom,
        "x0": x0,
        "x1": x1,
        "ticks": ticks,
        "x_title": x_title,
        "timed": timed,
        "y_ticks": [{"y": y(v), "label": f"{int(v):,}"} for v in y_ticks],
        "points": points,
        "segments": segments,
        "path": "M" + " L".join(f"{p['x']},{p['y']}" for p in points),
    }


def failure_strip(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Rank × cycle and node × cycle cells where a cycle's primary failure landed."""
    shown = [r for r in rows if r.get("cycle") is not None][-MAX_STRIP_COLUMNS:]
    hit = [r for r in shown if r.get("primary_rank") is not None or r.get("primary_node")]
    if not hit:
        return None
    cols = len(shown)
    cell_w = max(3.0, min(18.0, (WIDTH - PAD_LEFT - PAD_RIGHT) / cols))
    cell_h = 16
    col_x = {r["cycle"]: round(PAD_LEFT + i * cell_w, 1) for i, r in enumerate(shown)}

    def strip(key: str, label: str) -> dict[str, Any] | None:
        counts: dict[Any, int] = {}
        for r in hit:
            if r.get(key) is not None and r.get(key) != "":
                counts[r[key]] = counts.get(r[key], 0) + 1
        if not counts:
            return None
        keys = sorted(counts, key=lambda k: (-counts[k], str(k)))[:MAX_STRIP_ROWS]
        keys.sort(key=lambda k: (isinstance(k, str), k))
        row_y = {k: 4 + i * cell_h for i, k in enumerate(keys)}
        cells = [
            {
                "x": col_x[r["cycle"]],
                "y": row_y[r[key]],
                "cls": verdict_class(r),
                "title": f"cycle {r['cycle']}: {r.get('cause') or ''} on {label} {r[key]}",
            }
            for r in hit
            if r.get(key) in row_y
        ]
        return {
            "label": label,
            "rows": [{"y": row_y[k], "label": f"{label} {k}", "count": counts[k]} for k in keys],
            "cells": cells,
            "height": 8 + len(keys) * cell_h + 22,
            "hidden": max(len(counts) - len(keys), 0),
        }

    step = max(1, math.ceil(cols / 12))
    return {
        "width": WIDTH,
        "cell_w": round(max(cell_w - 1, 1.5), 1),
        "cell_h": cell_h - 2,
        "x0": PAD_LEFT,
        "x_labels": [
            {"x": round(col_x[r["cycle"]] + cell_w / 2, 1), "label": str(r["cycle"])}
            for i, r in enumerate(shown)
            if i % step == 0
        ],
        "strips": [s for s in (strip("primary_rank", "rank"), strip("node_of", "node")) if s],
        "columns": cols,
        "cut": len([r for r in rows if r.get("cycle") is not None]) > cols,
    }


def _dur(seconds: float) -> str:
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m} min {s:02d} s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h} h {m:02d} min"
    d, h = divmod(h, 24)
    return f"{d} d {h:02d} h"
