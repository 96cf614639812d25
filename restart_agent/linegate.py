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

The answer is cached per line with every ASCII digit replaced by `0` (literals with digits
are compared the same way, which can only keep more lines), so the same warning printed by
1,024 ranks with different numbers costs one `bytes.translate` and one dict lookup.
Lines with a CR before their end or a NUL byte are never skipped: `line()` rewrites those
(progress-bar redraws, NUL removal), so their text may hold literals their bytes do not.
Nor are lines with non-ASCII bytes (`str.strip()` removes Unicode spaces, which would
move the end of the text that needles like "Error" + END refer to).
"""

from __future__ import annotations

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
        self._rows: list[tuple[_Set, _Set, _Set | _Unknown]] = [
            (_masked(row.triggers), _masked(row.requires), _UNKNOWN) for row in registry.patterns
        ]
        self._reads = tuple(c.encode("ascii").translate(_ZEROS) for c in reads)
        self._cache: dict[bytes, bool] = {}

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
        if any(c in key for c in self._reads):
            return False
        for i, (triggers, requires, needles) in enumerate(self._rows):
            if triggers is not None and not any(t in key for t in triggers):
                continue
            if requires is not None and not any(t in key for t in requires):
                continue
            if isinstance(needles, _Unknown):
                needles = _masked(regex_needles(self._patterns[i].regex))
                self._rows[i] = (triggers, requires, needles)
            if needles is None or any(t in key for t in needles):
                return False
        return True
