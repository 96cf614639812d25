"""Progress extraction: last completed iteration and last checkpoint saved.

Dialects are data (`progress.yaml`, extendable via RELAUNCH_PROGRESS_DIALECTS). Only the
first and the last progress line of a log matter, so instead of looking at every line the
tracker searches each region backwards from its end (`bytes.rfind` on the dialects'
anchors) and stops at the first line that matches; the first iteration is searched
forwards once. Nothing matched means `Progress(known=False)`: unknown, never "none".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from restart_agent.model import Progress
from restart_agent.prefixes import split_prefix
from restart_agent.registry import DialectRow

LineAt = Callable[[bytes, int], tuple[int, int, bytes]]


@dataclass(frozen=True)
class _Hit:
    line: int
    dialect: str
    iteration: int | None
    path: str | None


def _interpret(
    raw: bytes, dialects: tuple[DialectRow, ...]
) -> tuple[str, int | None, str | None] | None:
    text = raw.decode("utf-8", "replace").rstrip("\r")
    body = split_prefix(text.rsplit("\r", 1)[-1] if "\r" in text else text).body
    if "\r" in text and not any(d.anchor in body for d in dialects):
        body = split_prefix(text).body
    for d in dialects:
        if d.anchor not in body:
            continue
        last = None
        for last in d.regex.finditer(body):  # noqa: B007 - the last match counts
            pass
        if last is None:
            continue
        g = last.groupdict()
        it = int(g["it"]) if g.get("it") else None
        if it is not None and g.get("epoch") and g.get("total"):
            it = int(g["epoch"]) * int(g["total"]) + it
        if it is None and not g.get("path"):
            continue
        return d.id, it, g.get("path")
    return None


class ProgressTracker:
    """Keeps the first/last iteration line and the last checkpoint line of a stream."""

    def __init__(self, dialects: tuple[DialectRow, ...]) -> None:
        self.iteration = tuple(d for d in dialects if d.kind == "iteration")
        self.checkpoint = tuple(d for d in dialects if d.kind == "checkpoint")
        self._it_anchors = tuple(dict.fromkeys(d.anchor.encode() for d in self.iteration))
        self._ck_anchors = tuple(dict.fromkeys(d.anchor.encode() for d in self.checkpoint))
        self.first: _Hit | None = None
        self.last: _Hit | None = None
        self.last_ckpt: _Hit | None = None

    def region(self, region: bytes, base_line: int, line_at: LineAt) -> None:
        """Look at one region (starts with the newline before its first line)."""
        hit = self._search_last(region, base_line, line_at, self._it_anchors, self.iteration)
        if hit is not None:
            self.last = hit
            if self.first is None:
                self.first = self._search_first(region, base_line, line_at) or hit
        ck = self._search_last(region, base_line, line_at, self._ck_anchors, self.checkpoint)
        if ck is not None:
            self.last_ckpt = ck

    def _search_last(
        self,
        region: bytes,
        base_line: int,
        line_at: LineAt,
        anchors: tuple[bytes, ...],
        dialects: tuple[DialectRow, ...],
    ) -> _Hit | None:
        best: tuple[int, str, int | None, str | None] | None = None  # (line start, ...)
        floor = 1
        for anchor in anchors:
            end = len(region)
            while True:
                p = region.rfind(anchor, floor, end)
                if p < 0:
                    break
                start, stop, raw = line_at(region, p)
                got = _interpret(raw, dialects)
                if got is not None:
                    if best is None or start > best[0]:
                        best = (start, *got)
                        floor = stop
                    break
                end = start
        if best is None:
            return None
        line = base_line + region.count(b"\n", 0, best[0])
        return _Hit(line, best[1], best[2], best[3])

    def _search_first(self, region: bytes, base_line: int, line_at: LineAt) -> _Hit | None:
        best: tuple[int, str, int | None, str | None] | None = None
        ceiling = len(region)
        for anchor in self._it_anchors:
            start_at = 1
            while True:
                p = region.find(anchor, start_at, ceiling)
                if p < 0:
                    break
                start, stop, raw = line_at(region, p)
                got = _interpret(raw, self.iteration)
                if got is not None and got[1] is not None:
                    if best is None or start < best[0]:
                        best = (start, *got)
                        ceiling = start
                    break
                start_at = stop
        if best is None:
            return None
        line = base_line + region.count(b"\n", 0, best[0])
        return _Hit(line, best[1], best[2], best[3])

    def result(self) -> Progress:
        if self.last is None and self.last_ckpt is None:
            return Progress(known=False)
        last = self.last
        ck = self.last_ckpt
        return Progress(
            known=True,
            last_iteration=last.iteration if last else None,
            first_iteration=self.first.iteration if self.first else None,
            last_checkpoint=(
                ck.path or (f"iteration {ck.iteration}" if ck.iteration is not None else None)
            )
            if ck
            else None,
            checkpoint_iteration=ck.iteration if ck else None,
            dialect=last.dialect if last else (ck.dialect if ck else None),
            line=last.line if last else (ck.line if ck else None),
        )
