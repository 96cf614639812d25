r"""Caches for the per-line work of `LineInterpreter` (restart_agent.lines).

- `RowSelector.rows_for(body, hints)`: the pattern rows worth trying on a line, exactly as
  `LineInterpreter.line` needs them (a row is tried if one of its triggers is in the
  line, under the given hint triggers, and one of its `requires`, if any). Which rows that
  is depends only on which literals the line holds, so the answer is cached under the line
  with every ASCII digit replaced by NUL (no literal holds NUL; lines reach here without
  NULs) plus, for the few literals with digits (`Signal 9`), whether each is present
  (asked only when one of them, masked, is in the masked line). The same message from
  1,024 ranks with different numbers costs one dict lookup. A line not cached finds its
  rows as bit masks from the literals it holds, each tested once (one native pass where
  Hyperscan is installed), as `restart_agent.linegate` does.
- `fingerprint(failure_class, message)`: `restart_agent.fingerprint.fingerprint`, memoised
  under the message with every ASCII digit replaced by `1` (0 kept where the message holds
  `0x`). That is exact: the masks of `fingerprint.normalize` treat digits alike (`\d`,
  `\w`, `[0-9a-f]`; the only literal digit is the 0 of `\b0x`, which cannot match without
  a `0x` in the message) and every digit ends inside a masked token, so the normalised
  text stays the same (`tests/restart_agent/test_agent_speed.py` checks it). The same
  message from 1,024 ranks with different numbers is normalised once.

Both caches are bounded: when full they start afresh.
"""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet

from relaunch.restart_agent import fingerprint as _fp
from relaunch.restart_agent.multiscan import LiteralScan, literal_scan, native_available
from relaunch.restart_agent.registry import PatternRow, Registry

MAX_CACHE = 1 << 14
MAX_KEY = 1024  # longer lines and messages are not cached (bounds the memory: ~40 MB)
_NUL = bytes.maketrans(b"0123456789", b"\x00" * 10)
_ALL_ONES = bytes.maketrans(b"0123456789", b"1111111111")
_ONES = bytes.maketrans(b"23456789", b"11111111")  # 0 stays: `0x` is a literal of a mask


class RowSelector:
    def __init__(self, registry: Registry) -> None:
        self.rows = registry.patterns
        minimal = registry.prefilter
        # rows as bit masks (bit i: row i): per minimal trigger, its triggers with the rows
        # each triggers and the (requires literal, rows) pairs of those rows, so a line
        # tests each literal at most once and only the requires of the rows it reaches
        by_trigger: dict[str, int] = {}
        by_requires: dict[str, int] = {}
        self._no_requires = 0
        for i, row in enumerate(self.rows):
            for t in row.triggers:
                by_trigger[t] = by_trigger.get(t, 0) | 1 << i
            if not row.requires:
                self._no_requires |= 1 << i
            for t in row.requires:
                by_requires[t] = by_requires.get(t, 0) | 1 << i
        self._by_min: dict[str, list[tuple[str, int, tuple[tuple[str, int], ...]]]] = {}
        for t, bits in by_trigger.items():
            m = next(k for k in minimal if k in t)
            pairs = tuple((r, b) for r, b in sorted(by_requires.items()) if b & bits)
            self._by_min.setdefault(m, []).append((t, bits, pairs))
        # where Hyperscan is installed: one native pass per line tells which triggers and
        # requires it holds (UTF-8 is self-synchronising: a text holds a literal exactly
        # when its encoding holds the literal's), and the rows follow by bit operations
        self._native: LiteralScan | None = None
        lits = tuple(sorted(set(by_trigger) | set(by_requires)))
        if native_available() and all(lits):
            self._native = literal_scan((), tuple(t.encode("utf-8", "surrogatepass") for t in lits))
            self._lit_rows = tuple(by_trigger.get(t, 0) for t in lits)
            self._lit_min = tuple(
                next((k for k in minimal if k in t), None) if t in by_trigger else None
                for t in lits
            )
            self._lit_requires = tuple(by_requires.get(t, 0) for t in lits)
        literals = {t for r in self.rows for t in r.triggers + r.requires}
        self._digit_literals = tuple(sorted(t for t in literals if any(c.isdigit() for c in t)))
        masked = {t.encode("ascii").translate(_NUL) for t in self._digit_literals}
        self._masked_digits = (
            re.compile(b"|".join(re.escape(t) for t in sorted(masked))) if masked else None
        )
        self._cache: dict[tuple[object, ...], list[PatternRow]] = {}

    def rows_for(self, body: str, hints: AbstractSet[str] | None) -> list[PatternRow]:
        if len(body) > MAX_KEY:
            return self._select(body, hints)
        masked = body.encode("utf-8", "surrogatepass").translate(_NUL)
        key = (
            masked,
            None if hints is None else frozenset(hints),
            # a digit literal can only be in the line if its masked form is in `masked`
            tuple([t in body for t in self._digit_literals])
            if self._masked_digits is not None and self._masked_digits.search(masked)
            else (),
        )
        got = self._cache.get(key)
        if got is None:
            got = self._select(body, hints)
            if len(self._cache) >= MAX_CACHE:
                self._cache.clear()
            self._cache[key] = got
        return got

    def _select(self, body: str, hints: AbstractSet[str] | None) -> list[PatternRow]:
        if self._native is not None:
            return self._select_native(body, hints)
        reached = 0  # rows one of whose triggers (under the hints) the line holds
        requires: list[tuple[tuple[str, int], ...]] = []
        keys = self._by_min if hints is None else hints
        for m in keys:
            if m in body:
                for t, bits, pairs in self._by_min.get(m, ()):
                    if t in body:
                        reached |= bits
                        requires.append(pairs)
        held = reached & self._no_requires  # ... and one of whose requires, if any
        wanted = reached & ~self._no_requires
        for pairs in requires:
            if not wanted:
                break
            for t, bits in pairs:
                if bits & wanted and t in body:
                    held |= bits & wanted
                    wanted &= ~bits
        return self._in_order(held)

    def _select_native(self, body: str, hints: AbstractSet[str] | None) -> list[PatternRow]:
        """`_select` with the literals found by one native pass (the same answer)."""
        _, present = self._native.scan(body.encode("utf-8", "surrogatepass"))  # type: ignore[union-attr]
        reached = required = 0
        for i in present:
            if hints is None or self._lit_min[i] in hints:
                reached |= self._lit_rows[i]
            required |= self._lit_requires[i]
        return self._in_order(reached & (self._no_requires | required))

    def _in_order(self, held: int) -> list[PatternRow]:
        """The rows of the bit mask `held`, in the table's order."""
        rows = self.rows
        out = []
        while held:  # in the table's order
            low = held & -held
            out.append(rows[low.bit_length() - 1])
            held ^= low
        return out


_FINGERPRINTS: dict[tuple[str, str], str] = {}


def fingerprint(failure_class: str, message: str) -> str:
    """`restart_agent.fingerprint.fingerprint`, memoised."""
    if len(message) > MAX_KEY:
        return _fp.fingerprint(failure_class, message)
    raw = message.encode("utf-8", "surrogatepass")
    masked = raw.translate(_ONES if b"0x" in raw else _ALL_ONES).decode("utf-8", "surrogatepass")
    key = (failure_class, masked)
    got = _FINGERPRINTS.get(key)
    if got is None:
        got = _fp.fingerprint(failure_class, masked)
        if len(_FINGERPRINTS) >= MAX_CACHE:
            _FINGERPRINTS.clear()
        _FINGERPRINTS[key] = got
    return got
