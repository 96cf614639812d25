r"""Caches for the per-line work of `LineInterpreter` (restart_agent.lines).

- `RowSelector.rows_for(body, hints)`: the pattern rows worth trying on a line, exactly as
  `LineInterpreter.line` needs them (a row is tried if one of its triggers is in the
  line, under the given hint triggers, and one of its `requires`, if any). Which rows that
  is depends only on which literals the line holds, so the answer is cached under the line
  with every ASCII digit replaced by NUL (no literal holds NUL; lines reach here without
  NULs) plus, for the few literals with digits (`Signal 9`), whether each is present
  (asked only when one of them, masked, is in the masked line). The same message from
  1,024 ranks with different numbers costs one dict lookup.
- `fingerprint(failure_class, message)`: `restart_agent.fingerprint.fingerprint`, memoised
  under the message with every ASCII digit replaced by `1` (0 kept where the message holds
  `0x`). That is exact: the masks of `fingerprint.normalize` treat digits alike (`\d`,
  `\w`, `[0-9a-f]`; the only literal digit is the 0 of `\b0x`, which cannot match without
  a `0x` in the message) and every digit ends inside a masked token, so the normalised
  text stays the same (`tests/test_agent_speed.py` checks it). The same
  message from 1,024 ranks with different numbers is normalised once.

Both caches are bounded: when full they start afresh.
"""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet

from relaunch.restart_agent import fingerprint as _fp
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
        self._by_min: dict[str, list[tuple[str, int]]] = {}
        for i, row in enumerate(self.rows):
            for t in row.triggers:
                m = next(k for k in minimal if k in t)
                self._by_min.setdefault(m, []).append((t, i))
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
        hit: set[int] = set()
        keys = self._by_min if hints is None else hints
        for m in keys:
            if m in body:
                for t, i in self._by_min.get(m, ()):
                    if t in body:
                        hit.add(i)
        rows = self.rows
        return [
            rows[i]
            for i in sorted(hit)
            if not rows[i].requires or any(r in body for r in rows[i].requires)
        ]


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
