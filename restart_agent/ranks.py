"""Exact set of ranks seen in a log, at C speed.

`findall` over every rank prefix is exact but creates one object per line. Once the ranks
seen so far are exactly 0..N-1 (the usual case after the first chunk), a small regex that
matches only a prefix with a rank >= N (or a zero-padded one) tells in one C-level pass
whether a region could add anything; only then is `findall` run on it. The result is the
same as running `findall` everywhere.

Ranks are bounded as the prefix parser bounds them (`prefixes.bounded_int`): a number of
more than MAX_RANK_DIGITS digits (thousands of digits, 2**64) names no rank and is never
converted.
"""

from __future__ import annotations

import re

from relaunch.restart_agent.multiscan import NativeSearch, native_search
from relaunch.restart_agent.prefixes import MAX_RANK_DIGITS, RANK_FORMATS


def bounded_ranks(found: list[bytes]) -> set[int]:
    """The ranks among decimal digit strings, bounded as `prefixes.bounded_int` bounds a
    prefix's rank (at most MAX_RANK_DIGITS digits, leading zeros included)."""
    return {int(d) for d in set(found) if len(d) <= MAX_RANK_DIGITS}


def at_least(n: int, lookaround: bool = True) -> str:
    """Regex for decimal numbers >= n (plus any zero-padded number, to be re-checked).

    `lookaround=False`: the same without lookarounds (Hyperscan's syntax), for a number
    followed by a non-digit anyway (every format's tail starts with one)."""
    alts = [r"0\d+"]  # zero-padded: let findall decide
    s = str(n)
    length = len(s)
    alts.append(rf"[1-9]\d{{{length},}}")  # more digits
    if n == 0:
        return r"\d+"
    for i, ch in enumerate(s):
        d = int(ch)
        if d < 9:
            first = "[1-9]" if i == 0 else ""
            lo = d + 1
            cls = f"[{lo}-9]" if lo < 9 else "9"
            if i == 0 and first:
                cls = f"[{max(lo, 1)}-9]" if max(lo, 1) < 9 else "9"
            rest = length - i - 1
            alts.append(re.escape(s[:i]) + cls + (rf"\d{{{rest}}}" if rest else ""))
    alts.append(re.escape(s))
    if not lookaround:
        return "(?:" + "|".join(alts) + ")"
    # every alternative but the zero-padded one has at least len(s) digits: a lookahead
    # for them first makes the usual line (a smaller, shorter rank) fail in a step or two
    return "(?:" + alts[0] + rf"|(?=\d{{{length}}})(?:" + "|".join(alts[1:]) + r"))(?!\d)"


NATIVE_MIN = 1 << 16  # regions from this size on use the native detector


class RankCollector:
    """Collects ranks region by region; `ranks` is exact after every `region()` call."""

    def __init__(self) -> None:
        self.ranks: set[int] = set()
        self._seen: list[set[int]] = [set() for _ in RANK_FORMATS]
        self._native: NativeSearch | None = None
        self._plain = b""
        self._detector: re.Pattern[bytes] | None = self._build()

    def _build(self) -> re.Pattern[bytes] | None:
        """One regex for 'a prefix this collector has not seen', over all formats (and the
        same for a native search, `restart_agent.multiscan`, where there is one)."""
        alts, plain = [], []
        for (head, tail, _), seen in zip(RANK_FORMATS, self._seen, strict=True):
            n = len(seen)
            if seen and max(seen) != n - 1:
                self._native = None
                return None  # not exactly 0..n-1: fall back to findall everywhere
            alts.append(head[2:] + at_least(n).encode() + tail)  # head starts with \\n
            plain.append(head[2:] + at_least(n, lookaround=False).encode() + tail)
        self._native = None  # compiled when a large region comes (see `region`)
        self._plain = rb"\n(?:" + b"|".join(plain) + b")"
        return re.compile(rb"\n(?:" + b"|".join(alts) + b")")

    def region(self, region: bytes) -> None:
        if self._detector is not None:
            # the native search pays for its compile (~5 ms) only on large regions: a
            # stream fed line by line, ranks still appearing, stays on `re`
            if self._native is None and len(region) >= NATIVE_MIN:
                self._native = native_search(self._plain)
            if self._native is not None and len(region) >= NATIVE_MIN:
                if not self._native(region):
                    return
            elif self._detector.search(region) is None:
                return
        changed = False
        for (_, _, full), seen in zip(RANK_FORMATS, self._seen, strict=True):
            found = full.findall(region)
            if found:
                before = len(seen)
                seen.update(bounded_ranks(found))
                changed = changed or len(seen) != before
        if changed or self._detector is None:
            self.ranks = set().union(*self._seen)
        if changed:
            self._detector = self._build()
