"""The cycle page's straggler strip: one cell per rank, coloured by its relative score.

`straggler_strip(stored)` turns a cycle's straggler scores (`cycles.stragglers`, the shape
of a verdict's `stragglers`: docs/straggler.md) into what `_straggler_strip.html` draws as
inline SVG, one row per node: the cell's height and colour give the rank's lowest relative
score in the cycle (1.0 = as fast as the median rank), named stragglers are outlined and
the suspect of a timeout is marked. None when the cycle has no scores.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from relaunch.restart_agent.model import StragglerReport

MAX_RANKS = 1024  # cells drawn per node (more are counted, not drawn)
WIDTH = 640
ROW_H = 44
PAD_LEFT = 72
TOP = 8


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _level(score: float, threshold: float) -> str:
    if score < threshold:
        return "slow"
    if score < 0.9:
        return "warn"
    return "ok"


def straggler_strip(stored: Any) -> dict[str, Any] | None:
    """Coordinates of the strip, or None when `stored` holds no per-rank scores."""
    if not isinstance(stored, Mapping):
        return None
    report = StragglerReport.from_dict(dict(stored))  # the stored JSON, read once
    named = {
        (str(s.get("node")), int(s["rank"]))
        for s in _list(report.named)
        if isinstance(s, Mapping) and isinstance(s.get("rank"), int)
    }
    suspect = report.suspect_rank
    rows = []
    for sc in _list(report.scores):
        if not isinstance(sc, Mapping) or not isinstance(sc.get("ranks"), Mapping):
            continue
        threshold = _num(sc.get("threshold")) or 0.7
        ranks = []
        for key, v in sc["ranks"].items():
            if not (isinstance(key, str) and key.isdigit() and isinstance(v, Mapping)):
                continue
            score = _num(v.get("lowest"))
            score = score if score is not None else _num(v.get("relative"))
            if score is None:
                continue
            ranks.append((int(key), score, v))
        ranks.sort()
        if not ranks:
            continue
        rows.append((sc, threshold, ranks))
    if not rows:
        return None
    out_rows = []
    for i, (sc, threshold, ranks) in enumerate(rows):
        shown = ranks[:MAX_RANKS]
        cell = max(2.0, min(28.0, (WIDTH - PAD_LEFT - 8) / len(shown)))
        y0 = TOP + i * ROW_H
        cells = []
        for j, (rank, score, v) in enumerate(shown):
            h = round(max(2.0, min(score, 1.0) * (ROW_H - 16)), 1)
            node = sc.get("node")
            cells.append(
                {
                    "x": round(PAD_LEFT + j * cell, 1),
                    "y": round(y0 + (ROW_H - 16) - h, 1),
                    "w": round(max(1.0, cell - 1), 1),
                    "h": h,
                    "rank": rank,
                    "score": round(score, 3),
                    "last": v.get("relative"),
                    "below": v.get("below"),
                    "section": v.get("section"),
                    "level": _level(score, threshold),
                    "named": (str(node), rank) in named,
                    "suspect": rank == suspect,
                    "label": len(shown) <= 32 or j % max(1, len(shown) // 16) == 0,
                }
            )
        out_rows.append(
            {
                "node": sc.get("node"),
                "y": y0,
                "label_y": y0 + (ROW_H - 16) // 2 + 4,
                "text_y": y0 + ROW_H - 4,
                "threshold": threshold,
                "threshold_y": round(y0 + (ROW_H - 16) - threshold * (ROW_H - 16), 1),
                "reports": sc.get("reports"),
                "cells": cells,
                "hidden": len(ranks) - len(shown),
            }
        )
    return {
        "width": WIDTH,
        "height": TOP + len(out_rows) * ROW_H + 4,
        "pad_left": PAD_LEFT,
        "rows": out_rows,
        "persistent": list(_list(report.persistent)),
        "suspect": suspect,
    }
