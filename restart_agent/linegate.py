"""Drops candidate lines that no pattern row can match, before they are decoded.

The scanner's prefilter finds lines holding a trigger literal (`rror`, `xception`, ...);
in noisy logs most of them are warnings such as `... is error-prone` or
`errors='ignore'` that no row can match. A row can only match a line holding one of its
triggers, one of its `requires` (if any) and one of the literals its regex needs
(`registry.regex_needles`). The interpreter also reads some lines that no row matches
(traceback headers and frames, launcher facts, torch elastic's exit reports); their
literals (`restart_agent.lines.READS`) are given to the gate. `LineGate.skip(raw)` is True
when no row has all three in the line and it holds none of those literals, so handing it
to `LineInterpreter.line()` could change nothing. A row's needles are derived (and its
regex compiled) only when a line first holds its triggers and requires: a start pays for
the rows its log reaches, not for the whole table.

Rows are bit masks: which rows a line reaches follows from which literals it holds by `|`
and `&`, each literal tested once. Where Hyperscan is installed (`restart_agent.multiscan`)
one native pass per line finds them all; elsewhere each trigger is tested once and only the
requires of the rows those triggers reach (a log of distinct error lines, issue 26, pays
this for nearly every line: about 10 microseconds instead of ~100 for the row-by-row test).

The answer is cached per line with every ASCII digit replaced by `0` (literals with digits
are compared the same way, which can only keep more lines), so the same warning printed by
1,024 ranks with different numbers costs one `bytes.translate` and one dict lookup.
Lines with a CR before their end or a NUL byte are never skipped: `line()` rewrites those
(progress-bar redraws, NUL removal), so their text may hold literals their bytes do not.
Nor are lines with non-ASCII bytes (`str.strip()` removes Unicode spaces, which would
move the end of the text that needles like "Error" + END refer to).
"""

from __future__ import annotations

from relaunch.restart_agent.multiscan import LiteralScan, literal_scan, native_available
from relaunch.restart_agent.registry import END, Registry, regex_needles

MAX_CACHE = 1 << 15  # distinct digit-masked lines remembered (then the cache starts afresh)
MAX_KEY = 1024  # longer lines are decided without the cache (bounds its memory: ~40 MB)
_ZEROS = bytes.maketrans(b"123456789", b"000000000")
_SPACE = b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"  # what str.strip() removes, of ASCII
_END = END.encode()


_Set = tuple[bytes, ...] | None  # masked literals one of which a line must hold (None: any)


class _Unknown:
    """A row's needles not derived yet."""


_UNKNOWN = _Unknown()


def _masked(literals: tuple[str, ...] | frozenset[str] | None) -> _Set:
    if not literals:
        return None
    return tuple(sorted({t.encode("ascii").translate(_ZEROS) for t in literals}))


class LineGate:
    """`skip(raw)`: True when no pattern row can match the (rank-prefixed) line `raw`."""

    def __init__(self, registry: Registry, reads: tuple[str, ...] = ()) -> None:
        """`reads`: literals of lines the interpreter acts on without a pattern row
        (traceback lines, launcher facts, ...: `restart_agent.lines.READS`); never skipped."""
        self._patterns = registry.patterns
        # per row: (triggers, requires, needles), masked; a row's needles (a parse of its
        # regex, ~0.2 ms each) are derived the first time a line holds its triggers and
        # requires, so a start pays only for the rows its log can reach
        self._needles: list[_Set | _Unknown] = [_UNKNOWN] * len(registry.patterns)
        # the rows as bit masks (bit i: row i), per masked trigger literal: the rows it
        # triggers and the (masked requires literal, rows) pairs of those rows, so a line
        # tests each trigger once and only the requires of the rows its triggers reach
        by_trigger: dict[bytes, int] = {}
        by_requires: dict[bytes, int] = {}
        self._no_requires = 0
        for i, row in enumerate(registry.patterns):
            for t in _masked(row.triggers) or (b"",):  # no triggers: any line (b"" in key)
                by_trigger[t] = by_trigger.get(t, 0) | 1 << i
            requires = _masked(row.requires)
            if requires is None:
                self._no_requires |= 1 << i
            for t in requires or ():
                by_requires[t] = by_requires.get(t, 0) | 1 << i
        self._triggers = tuple(
            (t, rows, tuple((r, b) for r, b in sorted(by_requires.items()) if b & rows))
            for t, rows in sorted(by_trigger.items())
        )
        self._reads = tuple(c.encode("ascii").translate(_ZEROS) for c in reads)
        self._cache: dict[bytes, bool] = {}
        # where Hyperscan is installed: one native pass per line tells which of these
        # literals it holds (each at most once), and the rows follow by bit operations
        self._native: LiteralScan | None = None
        lits = tuple(sorted({t for t, _, _ in self._triggers if t} | set(by_requires)))
        lits += tuple(t for t in sorted(set(self._reads)) if t not in lits)
        if native_available() and all(lits) and not by_trigger.get(b""):
            self._native = literal_scan((), lits)
            self._lit_rows = tuple(by_trigger.get(t, 0) for t in lits)
            self._lit_requires = tuple(by_requires.get(t, 0) for t in lits)
            self._lit_read = frozenset(i for i, t in enumerate(lits) if t in set(self._reads))

    def skip(self, raw: bytes) -> bool:
        return self.skip_masked(raw.translate(_ZEROS))

    def skip_masked(self, key: bytes) -> bool:
        """`skip(raw)` given `raw.translate(_ZEROS)` (the scanner masks once for this and
        for `restart_agent.outcomes`)."""
        if len(key) > MAX_KEY:
            return self._decide(key)
        got = self._cache.get(key)
        if got is None:
            got = self._decide(key)
            if len(self._cache) >= MAX_CACHE:
                self._cache.clear()
            self._cache[key] = got
        return got

    def _decide(self, key: bytes) -> bool:
        """`key`: the line with its digits masked (NUL, CR and non-ASCII bytes kept)."""
        if b"\x00" in key or b"\r" in key.rstrip(b"\r\n") or not key.isascii():
            return False
        # the text's end is marked as needles mark it (line() strips the text)
        key = key.rstrip(_SPACE) + _END
        if self._native is not None:
            return self._decide_native(key)
        if any(c in key for c in self._reads):
            return False
        reached = 0  # rows one of whose triggers the line holds
        requires: list[tuple[tuple[bytes, int], ...]] = []
        for t, rows, rows_requires in self._triggers:
            if t in key:
                reached |= rows
                requires.append(rows_requires)
        if not reached:
            return True
        held = reached & self._no_requires  # ... and one of whose requires, if any
        wanted = reached & ~self._no_requires
        for pairs in requires:
            for t, rows in pairs:
                if rows & wanted and t in key:
                    held |= rows & wanted
                    wanted &= ~rows
            if not wanted:
                break
        return self._no_needles(key, held)

    def _decide_native(self, key: bytes) -> bool:
        """`_decide` with the literals found by one native pass (the same answer)."""
        _, present = self._native.scan(key)  # type: ignore[union-attr]
        if not present:
            return True
        if not self._lit_read.isdisjoint(present):
            return False
        reached = required = 0
        for i in present:
            reached |= self._lit_rows[i]
            required |= self._lit_requires[i]
        return self._no_needles(key, reached & (self._no_requires | required))

    def _no_needles(self, key: bytes, held: int) -> bool:
        """True when none of the rows `held` (a bit mask) has one of its regex's needles
        in `key` (or has none, so may match anything holding its literals)."""
        while held:
            low = held & -held
            i = low.bit_length() - 1
            held ^= low
            needles = self._needles[i]
            if isinstance(needles, _Unknown):
                needles = self._needles[i] = _masked(regex_needles(self._patterns[i].regex))
            if needles is None or any(t in key for t in needles):
                return False
        return True
