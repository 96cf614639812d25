"""What `LineInterpreter.line()` makes of a line, remembered per digit-masked line.

In dense failure output every rank prints the same error with its own numbers (rank,
PID, address, count): `[rank7]: RuntimeError: ... SeqNum=4711 ...`. Which row matches,
where the body, the message, the rank and the node are in the line, and where the rank
comes from do not depend on which digits the line holds, only on where digits are, when

- the line is ASCII without NUL or CR (so `line()` rewrites nothing and a byte offset is a
  character offset),
- every regex involved treats all digits alike (`digit_blind`: no literal digit, no digit
  range that covers only some digits, no backreference): the rank prefix parser, the
  rank-in-message searches and every pattern row that `line()` tries on the line,
- which of the trigger and `requires` literals holding a digit (`Signal 9`, `c10d`) it
  holds is part of the key (the rows tried depend on it; only those whose masked form is
  in the masked line are looked for: `ByLiterals`), and
- nothing stateful reads it (launcher facts, torch elastic's reports, traceback headers).

`Outcomes.get(raw, masked, hints)` returns that outcome for a line, computed once per
distinct line with every ASCII digit written as `0` (the line gate's mask, so the scanner
masks once for both). The fingerprint goes with it when the message holds no `0x` after
masking (then `rowcache.fingerprint` keys every such message alike); otherwise it is
computed per line. A thousand copies of one message across ranks cost one classification.
The result is a plain tuple (see `Outcome`), `NOTHING` (line() would change nothing) or
None (not known this way: call `line()`).
"""

from __future__ import annotations

import enum
import re
from typing import Any

from relaunch.restart_agent.facts import PREFIX as FACT_PREFIX
from relaunch.restart_agent.prefixes import (
    _BRACKETED,
    _EXCEPTION_HEAD,
    _LAUNCHER,
    _LAUNCHER_RANK,
    _MPI_LEAD,
    _NOT_LEAD,
    _PREFIX,
    _PY_BODY,
    _STREAM,
    _TORCH,
    bounded_int,
    split_prefix,
)
from relaunch.restart_agent.registry import PatternRow
from relaunch.restart_agent.rowcache import RowSelector, fingerprint

try:
    from re import _parser as _sre  # type: ignore[attr-defined]  # private, unstubbed
except ImportError:  # pragma: no cover - older Pythons name it sre_parse
    import sre_parse as _sre

MAX_CACHE = 1 << 14  # distinct masked lines remembered (then the cache starts afresh)
MAX_KEY = 1024  # longer lines are left to line()
TRACEBACK = "Traceback (most recent call last):"
# lines handed to restart_agent.elastic (and a 1.9 summary's `"message": "..."` field)
ELASTIC_WORDS = ("xitcode", "rank ", "Root Cause", "(local_rank:", '"message": "')
ELASTIC = re.compile("|".join(re.escape(w) for w in ELASTIC_WORDS))
# a rank named inside a message: NCCL's "[Rank 3]", "[PG ID 0 PG GUID 0(default_pg) Rank 3]",
# Habana's "[Rank:3]"
MESSAGE_RANK = re.compile(r"\[(?:PG [^\]]{0,80}?)?Rank[ :](\d{1,8})\]")
# srun --label's own report of a task (= global rank under srun) that died
SRUN_TASK = re.compile(r"^srun: error: \S+: tasks? (\d{1,8})(?:-\d{1,8})?: ")
NOTHING = ()  # the outcome of a line that line() reads and leaves (no row matches)
_DIGITS = range(0x30, 0x3A)


class _Miss(enum.Enum):
    """A cache miss (None is a cached value)."""

    MISS = 0


# Outcome: (row, body start, body end, prefix rank start, end, rank start, end, rank
# source, message start, end, node start, end, fingerprint or None, simple root); offsets
# in the line, -1 where there is none.
Outcome = tuple[Any, ...]


def digit_blind(rx: re.Pattern[str] | str) -> bool:
    """True when the regex treats every ASCII digit alike: changing digits of a text into
    other digits changes neither whether it matches nor where (or where its groups are)."""
    pattern = rx if isinstance(rx, str) else rx.pattern
    flags = 0 if isinstance(rx, str) else rx.flags
    try:
        return _blind(_sre.parse(pattern, flags))
    except Exception:  # noqa: BLE001 - anything the walk does not know: not blind
        return False


def _blind(items: Any) -> bool:  # sre parse items
    for op, av in items:
        if op in (_sre.LITERAL, _sre.NOT_LITERAL):
            if av in _DIGITS:
                return False
        elif op is _sre.IN:
            for iop, iav in av:
                if iop in (_sre.LITERAL, _sre.NOT_LITERAL) and iav in _DIGITS:
                    return False
                if iop is _sre.RANGE:
                    lo, hi = max(iav[0], 0x30), min(iav[1], 0x39)
                    if lo <= hi and (lo, hi) != (0x30, 0x39):
                        return False
                elif iop not in (_sre.LITERAL, _sre.NOT_LITERAL, _sre.NEGATE, _sre.CATEGORY):
                    return False
        elif op in (_sre.ANY, _sre.AT, _sre.CATEGORY):
            continue
        elif op in (_sre.SUBPATTERN, _sre.MAX_REPEAT, _sre.MIN_REPEAT):
            if not _blind(av[-1]):
                return False
        elif op is _sre.BRANCH:
            if not all(_blind(alt) for alt in av[1]):
                return False
        elif op in (_sre.ASSERT, _sre.ASSERT_NOT):
            if not _blind(av[1]):
                return False
        else:  # backreferences, conditionals, atomic/possessive forms: not looked into
            return False
    return True


# the regexes of line() besides the rows'; a test checks they stay blind
LINE_REGEXES = (
    _PREFIX,
    _PY_BODY,
    _NOT_LEAD,
    _MPI_LEAD,
    _EXCEPTION_HEAD,
    _BRACKETED,
    _STREAM,
    _TORCH,
    _LAUNCHER,
    _LAUNCHER_RANK,
    ELASTIC,
    MESSAGE_RANK,
    SRUN_TASK,
)


def _digits_end(text: str, at: int) -> int:
    end = at
    while end < len(text) and text[end].isdigit():
        end += 1
    return end


class Outcomes:
    """`get(raw, masked, hints)`: the outcome of a line under its digit mask (see above)."""

    def __init__(self, selector: RowSelector) -> None:
        self.selector = selector
        self._blind: dict[int, bool] = {}  # id(row) -> digit_blind(row.regex), as tried
        lits = [t.encode("ascii") for t in selector._digit_literals]
        self._literals = tuple((t, t.translate(_ZEROS)) for t in lits)
        masked = {m for _, m in self._literals}
        self._digit_literals = (
            re.compile(b"|".join(re.escape(t) for t in sorted(masked))) if masked else None
        )
        self._cache: dict[tuple[bytes, object], object] = {}

    def get(self, raw: bytes, masked: bytes, hints: frozenset[str] | None) -> Outcome | None:
        """The outcome of `raw` (whose mask is `masked`; see the module docstring)."""
        got = self.by_mask(raw, masked, hints)
        return got.get(raw, self) if type(got) is ByLiterals else got  # type: ignore[return-value]

    def by_mask(self, raw: bytes, masked: bytes, hints: frozenset[str] | None) -> object:
        """What the mask alone tells: the outcome (tuple, NOTHING or None), or, for a line
        that may hold a literal with digits (`Signal 9`, `c10d`: the rows tried depend on
        which it holds), a `ByLiterals` that tells it per line."""
        key = (masked, hints)
        got = self._cache.get(key, _Miss.MISS)
        if got is _Miss.MISS:
            lits: tuple[bytes, ...] = ()
            if self._digit_literals is not None and self._digit_literals.search(masked):
                lits = tuple(t for t, m in self._literals if m in masked)
            got = ByLiterals(lits, masked, hints) if lits else self._outcome(raw, masked, hints)
            if len(self._cache) >= MAX_CACHE:
                self._cache.clear()
            self._cache[key] = got
        return got

    def _outcome(self, raw: bytes, masked: bytes, hints: frozenset[str] | None) -> Outcome | None:
        if (
            len(masked) > MAX_KEY
            or not masked.isascii()
            or b"\x00" in masked
            or b"\r" in masked
            or b"\n" in masked
        ):
            return None
        text = raw.decode("ascii")
        if text.startswith(FACT_PREFIX):
            return None
        split = split_prefix(text)
        rest = split.body
        body = rest.strip()
        if not body:
            return NOTHING
        if ELASTIC.search(body) or body.startswith(TRACEBACK) or body.startswith('File "'):
            return None
        rows = self.selector.rows_for(body, hints)
        for r in rows:
            blind = self._blind.get(id(r))
            if blind is None:
                blind = self._blind[id(r)] = digit_blind(r.regex)
            if not blind:
                return None
        bs = len(text) - len(rest) + (len(rest) - len(rest.lstrip()))
        unprefixed = split.launcher and rest == text.lstrip()
        ka = split.rank_at
        ke = _digits_end(text, ka) if ka >= 0 else -1
        for row in rows:
            m = row.regex.search(body)
            if m is None:
                continue
            return self._matched(row, m, body, bs, ka, ke, unprefixed)
        return NOTHING

    def _matched(
        self,
        row: PatternRow,
        m: re.Match[str],
        body: str,
        bs: int,
        ka: int,
        ke: int,
        unprefixed: bool,
    ) -> Outcome:
        """The outcome of `line()`'s match `m` (offsets in `body`, which starts at `bs`)."""
        groups = m.groupdict()
        ms, me = m.span("msg") if groups.get("msg") else m.span(0)
        ra, re_, source = ka, ke, None
        if ka >= 0:
            source = "launcher" if unprefixed else "prefix"
        else:
            got, source = None, "message"
            if groups.get("rank") and bounded_int(groups["rank"]) is not None:
                got, source = m.span("rank"), row.rank_source
            elif body.startswith("srun: error:") and (sm := SRUN_TASK.match(body)):
                got = sm.span(1)
            elif "Rank" in body and (rm := MESSAGE_RANK.search(body)):
                got = rm.span(1)
            if got is not None:
                ra, re_ = bs + got[0], bs + got[1]
            else:
                source = None
        na = ne = -1
        if groups.get("node") is not None:
            na, ne = m.span("node")
            na, ne = bs + na, bs + ne
        msg = body[ms:me]
        fp = None
        if b"0x" not in msg.encode("ascii").translate(_ZEROS):
            fp = fingerprint(row.failure_class, msg)
        # a root whose rank is its prefix's, with no node and a known fingerprint: the usual
        # dense line, counted without the general path (`LineInterpreter.counted_root`)
        simple = row.role == "root" and ka >= 0 and ra == ka and na < 0 and fp is not None
        return (
            row, bs, bs + len(body), ka, ke, ra, re_, source, bs + ms, bs + me, na, ne, fp, simple
        )  # fmt: skip


_ZEROS = bytes.maketrans(b"123456789", b"000000000")


class ByLiterals:
    """The outcomes of the lines of one mask, per which of the literals with digits whose
    masked form is in the mask (`lits`) each line holds."""

    __slots__ = ("lits", "masked", "hints", "by")

    def __init__(self, lits: tuple[bytes, ...], masked: bytes, hints: frozenset[str] | None):
        self.lits = lits
        self.masked = masked
        self.hints = hints
        self.by: dict[tuple[bool, ...], Outcome | None] = {}

    def get(self, raw: bytes, outcomes: Outcomes) -> Outcome | None:
        held = tuple([t in raw for t in self.lits])
        got = self.by.get(held, _Miss.MISS)
        if got is _Miss.MISS:
            got = self.by[held] = outcomes._outcome(raw, self.masked, self.hints)
        return got
