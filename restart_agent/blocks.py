"""Traceback blocks: one rank's frame lines and the error line after them, as one unit.

Dense failure output is every rank printing the same traceback with its own numbers:

    [rank7]:   File "/work/train.py", line 302, in <module>
    [rank7]:     main()
    ...
    [rank7]: RuntimeError: ... SeqNum=4711 ...

`Blocks.take()` handles such a block (from the first frame line after the previous
candidate line to the candidate line that ends it) with a few C-level byte operations and
one dict lookup, instead of visiting its lines. What the scanner would do with it depends
only on the block with its digits masked (as the line gate masks them: all `0`), except
for the rank prefix of the frame lines, which is read from the real head:

- the frame part (`_shape`): every line holding `File "` holds it once, after one
  same masked head, and nothing that `LineInterpreter.frame()` refuses (NUL, CR, a frame
  text over its limit or holding torch elastic's words) is in it. Then, if the real head
  is the same on all of them (one `bytes.count`) and `frame()` would take it for a rank
  (`LineInterpreter.frame_head`, remembered per head), `frame()` would take each of those
  lines for that rank: they go over as one span (restart_agent.frames), copied only if
  they are kept;
- the error line: the line gate's answer and its outcome (restart_agent.outcomes, itself
  remembered per masked line), applied with `LineInterpreter.apply`.

Anything else (a frame line with a trigger, a mixed or refused run, a long block) is left
to the scanner's general path, which gives the same result line by line
(`tests/restart_agent/test_agent_speed.py` compares them).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from typing import Any

from relaunch.restart_agent.frames import FRAME, MAX_TEXT, PendingSpan, span_of
from relaunch.restart_agent.linegate import LineGate
from relaunch.restart_agent.lines import ELASTIC_WORDS, MAX_HEAD, MAX_HEADS, LineInterpreter
from relaunch.restart_agent.outcomes import NOTHING, ByLiterals
from relaunch.restart_agent.prefixes import split_prefix

MAX_BLOCK = 4096  # longer blocks take the general path
MAX_CACHE = 1 << 13  # distinct masked blocks remembered (bounds the memory: ~32 MB)
# a frame text over the limit of frame() (which leaves it to line())
LONG_FRAME = re.compile(re.escape(FRAME) + b"[^\n]{%d}" % (MAX_TEXT - len(FRAME) + 1))
ELASTIC_BYTES = tuple(w.encode() for w in ELASTIC_WORDS)
_DIGIT_RUN = re.compile(rb"\d+")
# what the masked block tells: (head length, frame lines, lines before the error line, end
# of the last frame line, the gate skips the error line, its outcome by mask)
Shape = tuple[int, int, int, int, bool, Any]
Head = tuple[bytes, "int | None", "bytes | None"]


class _Miss(enum.Enum):
    """A cache miss (None is a cached value)."""

    MISS = 0


def frames_refused(lines: bytes, head: bytes) -> bool:
    """Whether `frame()` refuses some frame line among `lines` (whole lines, each line
    holding `File "` holding it once, right after `head`): a NUL or a CR anywhere (more
    than `frame()` refuses: only ever sends lines to the general path), a frame text over
    its limit, or one of torch elastic's words in a frame text (searched with the heads cut
    off only if one is in the lines at all: relaunch's `[rank 3]:` heads hold `rank `)."""
    if b"\x00" in lines or b"\r" in lines or LONG_FRAME.search(lines):
        return True
    for w in ELASTIC_BYTES:
        if w in lines:
            rest = (b"\n" + lines).replace(b"\n" + head, b"\n")
            return any(x in rest for x in ELASTIC_BYTES)
    return False


_MISS = _Miss.MISS


class Blocks:
    """`take(...)`: one traceback block handled as a unit (see the module docstring)."""

    def __init__(
        self,
        interp: LineInterpreter,
        gate: LineGate,
        hints_of: Callable[[Any], frozenset[str]],
    ) -> None:
        """`hints_of(found)`: the trigger strings of a candidate line from the scanner's
        `found` (one trigger as bytes, or a frozenset of them)."""
        self.interp = interp
        self.gate = gate
        self.hints_of = hints_of
        # masked block, the line's triggers -> its `Shape`; None: the general path
        self._cache: dict[tuple[bytes, object], Shape | None] = {}
        # real head -> (the needle that finds a frame line with it, its rank, the rank's
        # digits as written) or None (frame() refuses it)
        self._heads: dict[bytes, Head | None] = {}

    def take(self, region: bytes, hs: int, s: int, end: int, found: object, lineno: int) -> bool:
        """Hand over the block `region[hs:end]`: frame lines from `hs` (a line start), the
        candidate line `region[s:end]` (line number `lineno`, triggers `found`) last. False
        (nothing done) when it takes the general path."""
        if end - hs > MAX_BLOCK:
            return False
        masked = region[hs:end].translate(_ZEROS)
        key = (masked, found)
        got = self._cache.get(key, _MISS)
        if got is _MISS:
            got = self._shape(masked, s - hs, region[s:end], self.hints_of(found))
            if len(self._cache) >= MAX_CACHE:
                self._cache.clear()
            self._cache[key] = got
        if got is None:
            return False
        hl, n, k, fe, skip, outcome = got
        head = region[hs : hs + hl]
        by_head = self._heads.get(head, _MISS)
        if by_head is _MISS:
            by_head = self._head(head)
        if by_head is None or region.count(by_head[0], hs - 1, s) != n:
            return False  # refused, or the heads differ in their digits (several ranks)
        rank = by_head[1]
        it = self.interp
        pending: PendingSpan = (region, hs, hs + fe, lineno - k, hl, n)
        if skip:
            it.add_span(rank, span_of(pending))
            return True
        raw = region[s:end]
        if isinstance(outcome, ByLiterals):
            outcome = outcome.get(raw, it.outcomes())
        if outcome is None:
            it.add_span(rank, span_of(pending))
            it.line(raw, lineno, self.hints_of(found))
        elif outcome is NOTHING:
            it.add_span(rank, span_of(pending))
        elif outcome[13] and rank is not None and raw[outcome[3] : outcome[4]] == by_head[2]:
            it.counted_root(outcome, raw, lineno, rank, pending)
        else:
            it.apply(outcome, raw, lineno, rank, pending)
        return True

    def _head(self, head: bytes) -> Head | None:
        got = self.interp.frame_head(head)
        by_head = None
        if got is not None:  # (needle, rank, the rank's digits as written, if any)
            rank = got[0]
            digits = None
            if rank is not None:
                at = split_prefix((head + FRAME).decode("ascii")).rank_at
                digits = _DIGIT_RUN.match(head, at).group()  # type: ignore[union-attr]
            by_head = (b"\n" + head + FRAME, rank, digits)
        if len(self._heads) >= MAX_HEADS:
            self._heads.clear()
        self._heads[head] = by_head
        return by_head

    def _shape(self, masked: bytes, at: int, raw: bytes, hints: frozenset[str]) -> Shape | None:
        """What is known of a block from its masked form (see `_cache`); `at`: where its
        candidate line starts, `raw`: that line."""
        line = masked[at:]
        lines = masked[:at]
        if FRAME in line:
            return None  # a frame line with a trigger: frame() first, in the general path
        hl = lines.find(FRAME)  # the block starts with the first frame line
        head = lines[:hl]
        n = lines.count(FRAME)
        if (
            hl > MAX_HEAD
            or (b"\n" + lines).count(b"\n" + head + FRAME) != n
            or frames_refused(lines, head)
        ):
            return None
        fe = lines.find(b"\n", lines.rfind(FRAME))
        k = lines.count(b"\n")
        if self.gate.skip_masked(line):
            return hl, n, k, fe, True, None
        outcomes = self.interp._outcomes or self.interp.outcomes()
        return hl, n, k, fe, False, outcomes.by_mask(raw, line, hints)


_ZEROS = bytes.maketrans(b"123456789", b"000000000")  # the line gate's digit mask
