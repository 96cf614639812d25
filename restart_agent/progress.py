"""Progress extraction: last completed iteration and last checkpoint saved.

Dialects are data (`progress.yaml`, extendable via RELAUNCH_PROGRESS_DIALECTS). Only the
first and the last progress line of a log matter, so instead of looking at every line the
tracker searches each region backwards from its end (`bytes.rfind` on the dialects'
anchors) and stops at the first line that matches. When an anchor keeps turning up in
lines that are not progress reports (say `checkpoint` in warning paths), it switches to
one C-level `finditer` of the dialects' byte regexes over what is left of the region, so
the cost stays bounded. The first iteration is searched forwards the same way, once.
Nothing matched means `Progress(known=False)`: unknown, never "none".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from relaunch.restart_agent.facts import MAX_ITERATION
from relaunch.restart_agent.model import Progress
from relaunch.restart_agent.registry import DialectRow

LineAt = Callable[[bytes, int], tuple[int, int, bytes]]
TRIES = 32  # non-matching anchor hits looked at in Python before one C-level pass
WINDOW = 1 << 14  # bytes at the end of a region searched first for the last progress line


@dataclass(frozen=True)
class _Hit:
    start: int  # offset of the line in its region
    dialect: str
    iteration: int | None
    path: str | None
    group: bytes = b""  # the anchor of the dialect group that read the line


MAX_DIGITS = len(str(MAX_ITERATION))


def _number(raw: bytes | None) -> int | None:
    """A progress number, or None when absent or beyond `facts.MAX_ITERATION`."""
    if not raw or len(raw) > MAX_DIGITS:
        return None
    n = int(raw)
    return n if n <= MAX_ITERATION else None


def _reading(raw: bytes, d: DialectRow, m: re.Match[bytes]) -> tuple[int | None, str | None]:
    """(iteration, path) one match reports, (None, None) when it is no progress."""
    g = m.groupdict()
    if d.exclude is not None:
        lo = max(raw.rfind(b"\r", 0, m.start()), raw.rfind(b"\n", 0, m.start())) + 1
        hi = min(
            x for x in (raw.find(b"\r", m.end()), raw.find(b"\n", m.end()), len(raw)) if x >= 0
        )
        if d.exclude.search(raw, lo, hi):
            return None, None
    it = _number(g.get("it"))
    if g.get("it") and it is None:
        return None, None  # an absurd number is no progress
    if it is not None and d.skip_complete and g.get("total") and g["total"] == g["it"]:
        return None, None  # a finished bar (eval, loading shards) is no training progress
    if it is not None and it < d.min_it:
        return None, None
    if it is not None and d.scale != 1:  # a fractional counter (HF's 'epoch': 1.25)
        frac = (g.get("frac") or b"")[:9]
        it = it * d.scale + (int(frac) * d.scale) // 10 ** len(frac) if frac else it * d.scale
        if it > MAX_ITERATION:
            return None, None
    if it is not None and g.get("epoch") and g.get("total"):
        epoch, total = _number(g["epoch"]), _number(g["total"])
        if epoch is None or total is None:
            return None, None
        it = epoch * total + it
        if it > MAX_ITERATION:
            return None, None
    if it == 0 and d.skip_start and g.get("total"):
        return None, None  # a bar at its start (`0/375`, epoch 0): no step was taken yet
    path = g["path"].decode("utf-8", "replace") if g.get("path") else None
    return it, path


def _interpret(
    raw: bytes, dialects: tuple[DialectRow, ...]
) -> tuple[str, int | None, str | None] | None:
    """The progress a line reports: (dialect id, iteration, path), first dialect that fits.

    The last match of a dialect that is progress counts (tqdm redraws a bar with '\r').
    """
    for d in dialects:
        got: tuple[int | None, str | None] = (None, None)
        for m in d.bregex.finditer(raw):
            r = _reading(raw, d, m)
            if r != (None, None):
                got = r
        if got == (None, None):
            continue
        return d.id, got[0], got[1]
    return None


class _Seen:
    """What one region is known not to hold, shared by the searches of both kinds.

    `absent_from[x] = a`: no occurrence of `x` starts at or after offset `a`. Anchors held
    in other anchors (`checkpoint` in `saved checkpoint `) are covers: one search for a
    cover, or one C-level search of a regex for every anchor around it, tells that several
    anchors are absent, so a region without progress costs few passes.
    """

    def __init__(
        self, region: bytes, covers: dict[bytes, tuple[re.Pattern[bytes], tuple[bytes, ...]]]
    ):
        self.region = region
        self.covers = covers
        self.absent_from: dict[bytes, int] = {}
        self.found_at: dict[bytes, int] = {}

    def mark(self, x: bytes, lo: int) -> None:
        """`x` does not start at or after `lo`."""
        self.absent_from[x] = min(lo, self.absent_from.get(x, lo))

    def known_absent(self, x: bytes, lo: int) -> bool:
        a = self.absent_from.get(x)
        return a is not None and a <= lo

    def absent(self, x: bytes, lo: int) -> bool:
        """Whether `x` does not start at or after `lo` (searched once, then remembered)."""
        if self.known_absent(x, lo):
            return True
        if self.found_at.get(x, -1) < lo:
            p = self.region.rfind(x, lo)
            if p < 0:
                self.mark(x, lo)
                return True
            self.found_at[x] = p
        entry = self.covers.get(x)
        if entry is not None:  # the cover occurs: are the anchors around it there?
            rx, around = entry
            if self.found_at.get(b"\x00" + x, -1) < lo and not all(
                self.known_absent(a, lo) for a in around
            ):
                m = rx.search(self.region, lo)
                if m is None:
                    for a in around:
                        self.mark(a, lo)
                else:
                    self.found_at[b"\x00" + x] = m.start()
        return False


class _Kind:
    """Search for the dialects of one kind (iteration or checkpoint)."""

    def __init__(self, dialects: tuple[DialectRow, ...]) -> None:
        self.dialects = dialects
        groups: dict[bytes, list[DialectRow]] = {}
        for d in dialects:
            groups.setdefault(d.anchor.encode(), []).append(d)
        self.groups = [(a, tuple(ds)) for a, ds in groups.items()]
        self.parts: dict[bytes, tuple[bytes, ...]] = {}  # anchor -> covers inside it
        self.order = list(self.groups)  # search order: the group that read a line last first

    def use_covers(self, covers: tuple[bytes, ...]) -> None:
        for a, _ in self.groups:
            self.parts[a] = tuple(c for c in covers if c in a and c != a)

    def last(self, region: bytes, line_at: LineAt, seen: _Seen) -> _Hit | None:
        """The last line of `region` that one of the dialects reads (ties: first group).

        Searched in growing windows at the end of the region: the last progress line is
        usually near the end, so most anchors are then only looked for in a few KiB.
        """
        n = len(region)
        window = WINDOW
        while True:
            lo = max(1, n - window)
            hit = self._last_from(region, lo, line_at, seen)
            if hit is not None:
                hit = self._first_group(region, hit, line_at)
                i = next(i for i, g in enumerate(self.order) if g[0] == hit.group)
                if i:
                    self.order.insert(0, self.order.pop(i))
                return hit
            if lo == 1:
                return None
            window = n  # not in the tail: the whole region (rfind stops at the last hit)

    def _last_from(self, region: bytes, lo: int, line_at: LineAt, seen: _Seen) -> _Hit | None:
        """The last line read by a group whose anchor occurs at or after `lo`."""
        best: _Hit | None = None
        floor = lo
        # The result does not depend on the order (the last line wins, `_first_group` breaks
        # ties by table order); the group that hit last time likely hits near the end again
        # and lifts `floor`, so the others search only after its line.
        for anchor, ds in self.order:
            if seen.known_absent(anchor, floor) or any(
                seen.absent(c, floor) for c in self.parts.get(anchor, ())
            ):
                continue  # the anchor (or a part of it) does not occur
            if seen.known_absent(anchor, floor):
                continue  # a cover's search around it found none
            end = len(region)
            tries = 0
            while True:
                p = region.rfind(anchor, floor, end)
                if p < 0:
                    if end == len(region):
                        seen.mark(anchor, floor)
                    break
                start, stop, raw = line_at(region, p)
                got = _interpret(raw, ds)
                if got is not None:
                    best, floor = _Hit(start, *got, group=anchor), stop
                    break
                end = start
                tries += 1
                if tries >= TRIES:
                    hit = self._scan(region, floor, end, ds, line_at, last=True)
                    if hit is not None:
                        best = _Hit(hit.start, hit.dialect, hit.iteration, hit.path, anchor)
                        floor = line_at(region, hit.start)[1]
                    break
        return best

    def _first_group(self, region: bytes, hit: _Hit, line_at: LineAt) -> _Hit:
        """The hit as the first group (in table order) reading its line gives it.

        A group whose anchor begins before the window start was not searched there;
        searched over the whole region it would have found this same line first.
        """
        start, stop, raw = line_at(region, hit.start)
        for anchor, ds in self.groups:
            if anchor == hit.group:
                return hit
            if region.find(anchor, start, stop) >= 0:
                got = _interpret(raw, ds)
                if got is not None:
                    return _Hit(start, *got, group=anchor)
        return hit

    def first(self, region: bytes, line_at: LineAt) -> _Hit | None:
        best: _Hit | None = None
        ceiling = len(region)
        for anchor, ds in self.groups:
            begin = 1
            tries = 0
            while True:
                p = region.find(anchor, begin, ceiling)
                if p < 0:
                    break
                start, stop, raw = line_at(region, p)
                got = _interpret(raw, ds)
                if got is not None:
                    best, ceiling = _Hit(start, *got), start
                    break
                begin = stop
                tries += 1
                if tries >= TRIES:
                    hit = self._scan(region, begin, ceiling, ds, line_at, last=False)
                    if hit is not None:
                        best, ceiling = hit, hit.start
                    break
        return best

    @staticmethod
    def _scan(
        region: bytes, lo: int, hi: int, ds: tuple[DialectRow, ...], line_at: LineAt, last: bool
    ) -> _Hit | None:
        found = None
        for d in ds:
            for m in d.bregex.finditer(region, lo, hi):
                if found is None or (m.start() > found if last else m.start() < found):
                    found = m.start()
                if not last:
                    break
        while found is not None:
            start, stop, raw = line_at(region, found)
            got = _interpret(raw, ds)
            if got is not None:
                return _Hit(start, *got)
            # the match fell in the cut-out middle of an over-long line: look further
            found = None
            if last:
                for d in ds:
                    for m in d.bregex.finditer(region, lo, start):
                        found = m.start() if found is None else max(found, m.start())
            else:
                for d in ds:
                    hit = d.bregex.search(region, stop, hi)
                    if hit and (found is None or hit.start() < found):
                        found = hit.start()
        return None


def _around(cover: bytes, anchors: set[bytes]) -> tuple[re.Pattern[bytes], tuple[bytes, ...]]:
    """A regex that finds every anchor holding `cover` (searched from `cover`, a literal)."""
    around = tuple(sorted(a for a in anchors if cover in a and a != cover))
    alts = []
    for a in around:
        i = a.find(cover) + len(cover)
        alts.append(b"(?<=" + re.escape(a[:i]) + b")" + re.escape(a[i:]))
    return re.compile(re.escape(cover) + b"(?:" + b"|".join(alts) + b")"), around


class ProgressTracker:
    """Keeps the first/last iteration line and the last checkpoint line of a stream."""

    def __init__(self, dialects: tuple[DialectRow, ...]) -> None:
        self._it = _Kind(tuple(d for d in dialects if d.kind == "iteration"))
        self._ck = _Kind(tuple(d for d in dialects if d.kind == "checkpoint"))
        self._act = _Kind(tuple(d for d in dialects if d.kind == "activity"))
        self._fb = _Kind(tuple(d for d in dialects if d.kind == "fallback"))
        kinds = (self._it, self._ck, self._act, self._fb)
        anchors = {a for k in kinds for a, _ in k.groups}
        covers = tuple(sorted(c for c in anchors if any(c in a and c != a for a in anchors)))
        self._covers = {c: _around(c, anchors) for c in covers}
        self.anchors = tuple(sorted(anchors))  # every literal a dialect's search starts from
        for k in kinds:
            k.use_covers(covers)
        self.ran_past_startup = False  # an `activity` dialect matched (e.g. a high SeqNum)
        self.fallback: tuple[int, _Hit] | None = None  # last `fallback` line (no iteration)
        self.fallback_first: tuple[int, _Hit] | None = None
        self.first: tuple[int, _Hit] | None = None  # (line number, hit)
        self.last: tuple[int, _Hit] | None = None
        self.last_ckpt: tuple[int, _Hit] | None = None

    def region(
        self,
        region: bytes,
        base_line: int,
        line_at: LineAt,
        newlines: int | None = None,
        present: set[bytes] | None = None,
    ) -> None:
        """Look at one region (starts with the newline before its first line).

        `newlines`: `region.count(b"\\n")` if the caller knows it; line numbers of hits
        (usually near the end) are then counted from the end. `present`: the `anchors`
        the region holds, if the caller knows (`restart_agent.multiscan`): the others are
        not searched for.
        """
        total = region.count(b"\n") if newlines is None else newlines

        def line_no(start: int) -> int:
            return base_line + total - region.count(b"\n", start)

        seen = _Seen(region, self._covers)
        if present is not None:
            for a in self.anchors:
                if a not in present:
                    seen.mark(a, 0)
        hit = self._it.last(region, line_at, seen)
        if hit is not None:
            self.last = (line_no(hit.start), hit)
            if self.first is None:
                first = self._it.first(region, line_at) or hit
                self.first = (line_no(first.start), first)
        ck = self._ck.last(region, line_at, seen)
        if ck is not None:
            self.last_ckpt = (line_no(ck.start), ck)
        if self.last is None and self._fb.groups:
            fb = self._fb.last(region, line_at, seen)
            if fb is not None:
                self.fallback = (line_no(fb.start), fb)
                if self.fallback_first is None:
                    first_fb = self._fb.first(region, line_at) or fb
                    self.fallback_first = (line_no(first_fb.start), first_fb)
        # Only asked when no iteration was reported (policy reads it for such cycles alone):
        # once one is, the activity anchors' search (a pass over each region) is skipped.
        if not self.ran_past_startup and self._act.groups and self._no_iteration_yet():
            self.ran_past_startup = self._act.last(region, line_at, seen) is not None

    def _no_iteration_yet(self) -> bool:
        return self.last is None or self.last[1].iteration is None

    def result(self) -> Progress:
        last_it, first_it = self.last, self.first
        if last_it is None and self.fallback is not None:
            last_it, first_it = self.fallback, self.fallback_first
        if last_it is None and self.last_ckpt is None:
            return Progress(known=False, ran_past_startup=self.ran_past_startup)
        last = last_it[1] if last_it else None
        ck = self.last_ckpt[1] if self.last_ckpt else None
        ck_name = None
        if ck is not None:
            ck_name = ck.path or (f"iteration {ck.iteration}" if ck.iteration is not None else None)
        line = last_it[0] if last_it else (self.last_ckpt[0] if self.last_ckpt else None)
        return Progress(
            known=True,
            last_iteration=last.iteration if last else None,
            first_iteration=first_it[1].iteration if first_it else None,
            last_checkpoint=ck_name,
            checkpoint_iteration=ck.iteration if ck else None,
            dialect=last.dialect if last else (ck.dialect if ck else None),
            line=line,
            ran_past_startup=self.ran_past_startup and self._no_iteration_yet(),
        )
