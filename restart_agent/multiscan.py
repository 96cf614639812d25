"""Finding many literals in a region in one pass.

The scanner needs, for every region of a log, where each of the registry's trigger
literals occurs (`every`), and only whether some other literals occur at all (`once`: the
traceback frame marker, the progress dialects' anchors). Two backends give the same answer:

- `NativeScan`: one pass of Hyperscan/Vectorscan (the `hyperscan` package: a statically
  linked C library, a multi-literal automaton at memory speed), whatever the number of
  literals. Each occurrence of an `every` literal costs one Python call; a `once` literal
  is reported at most once (`HS_FLAG_SINGLEMATCH`).
- `StdlibScan`: one `re` pass per distinct first byte of the literals (a regex starting
  with a literal byte is searched with the regex engine's fast literal scan), and a chain
  of backward `bytes.rfind`s for a literal alone with its first byte. A `once` literal is
  dropped from its pass after its first occurrence (dense output holds hundreds of
  thousands of frame lines). Used where `hyperscan` is not installed (it has no wheel for
  the platform) or `RELAUNCH_NATIVE_SCAN=0`.

`literal_scan()` picks the backend. Results are exact either way: every occurrence of an
`every` literal, as (end offset, index), in no particular order. The one difference: where
occurrences of two literals overlap (`SIGBUSSIGKILL` holds `SIGBUS` and `SIGKILL`) and the
two share a first byte, the native pass reports both and a regex pass the one that starts
first. A literal held inside another (`CUDA error` in `CUDA error: out of memory`) is
always reported by both backends (the stdlib one searches it on its own).
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any, Protocol

Hits = list[tuple[int, int]]  # (end offset of an occurrence, index of its literal in `every`)


class LiteralScan(Protocol):
    every: tuple[bytes, ...]
    once: tuple[bytes, ...]

    def scan(self, region: bytes) -> tuple[Hits, set[int]]:
        """(occurrences of `every`, indexes of the `once` literals that occur)."""
        ...


class StdlibScan:
    """`re` passes per first byte plus `rfind` chains (see the module docstring)."""

    native = False

    def __init__(self, every: tuple[bytes, ...], once: tuple[bytes, ...]) -> None:
        self.every, self.once = every, once
        self._index = {lit: i for i, lit in enumerate(every)}
        self._once_index = {lit: i for i, lit in enumerate(once)}
        only_once = set(once) - set(every)
        self._both = tuple(lit for lit in once if lit in self._index)
        by_first: dict[bytes, set[bytes]] = {}
        for lit in set(every) | only_once:
            by_first.setdefault(lit[:1], set()).add(lit)
        # a literal held in another of its pass (`CUDA error` in `CUDA error: out of memory`)
        # would be hidden by it (a regex pass reports one literal per position and goes on
        # after it): it gets a chain of its own
        for first, v in list(by_first.items()):
            hidden = {x for x in v if any(x != y and x in y for y in v)}
            if hidden and len(v) > 1:
                by_first[first] = v - hidden
                for i, x in enumerate(sorted(hidden)):
                    by_first[first + b"\x00hidden%d" % i] = {x}
        alone = [next(iter(v)) for v in by_first.values() if len(v) == 1]
        # a literal alone with its first byte: a chain of backward rfinds (about twice the
        # speed of the regex engine's literal scan), or one `in` test for a `once` literal
        self._chains = tuple(sorted(x for x in alone if x not in only_once))
        self._tests = tuple(sorted(x for x in alone if x in only_once))
        # the rest: one regex per first byte, and the same without its `once` literals
        # for the part of the region after their first occurrences
        self._passes: list[tuple[re.Pattern[bytes], re.Pattern[bytes] | None, frozenset[bytes]]]
        self._passes = []
        for _, lits in sorted(by_first.items()):
            if len(lits) > 1:
                mine = frozenset(lits & only_once)
                rest = lits - mine
                self._passes.append(
                    (_alternation(lits), _alternation(rest) if mine and rest else None, mine)
                )

    def scan(self, region: bytes) -> tuple[Hits, set[int]]:
        hits: Hits = []
        present: set[int] = set()
        append = hits.append
        index, once_index = self._index, self._once_index
        for rx, without, mine in self._passes:
            pending = set(mine)
            for m in rx.finditer(region):
                g = m.group()
                if g in mine:
                    if g in pending:
                        pending.discard(g)
                        present.add(once_index[g])
                        if not pending:
                            if without is not None:
                                hits.extend(
                                    (m2.end(), index[m2.group()])
                                    for m2 in without.finditer(region, m.end())
                                )
                            break
                    continue
                append((m.end(), index[g]))
        rfind = region.rfind
        for lit in self._chains:
            i, n = index[lit], len(lit)
            end = len(region)
            while (p := rfind(lit, 0, end)) >= 0:
                append((p + n, i))
                end = p + n - 1
        for lit in self._tests:
            if lit in region:
                present.add(once_index[lit])
        if self._both:
            found = {self.every[i] for _, i in hits}
            present.update(once_index[lit] for lit in self._both if lit in found)
        return hits, present


def _alternation(lits: set[bytes]) -> re.Pattern[bytes]:
    """One regex for the literals, longest first (so `m.group()` names the longest one
    starting at a position)."""
    return re.compile(b"|".join(re.escape(x) for x in sorted(lits, key=lambda x: (-len(x), x))))


def _thread_scratch(local: threading.local, hs: Any, db: Any) -> Any:
    """This thread's Hyperscan scratch space for `db` (one per thread: Hyperscan's rule)."""
    scratch = getattr(local, "scratch", None)
    if scratch is None:
        scratch = local.scratch = hs.Scratch(db)
    return scratch


class NativeScan:
    """One Hyperscan pass (see the module docstring). A compiled database is shared; each
    thread scans with its own scratch space (Hyperscan's rule)."""

    native = True

    def __init__(self, every: tuple[bytes, ...], once: tuple[bytes, ...], hs: Any) -> None:
        self.every, self.once = every, once
        self._hs = hs
        n = len(every)
        db = hs.Database(mode=hs.HS_MODE_BLOCK)
        patterns = [re.escape(x) for x in every + once]
        flags = [0] * n + [hs.HS_FLAG_SINGLEMATCH] * len(once)
        db.compile(
            expressions=patterns,
            ids=list(range(len(patterns))),
            elements=len(patterns),
            flags=flags,
        )
        self._db = db
        self._n = n
        self._local = threading.local()

    def scan(self, region: bytes) -> tuple[Hits, set[int]]:
        scratch = _thread_scratch(self._local, self._hs, self._db)
        hits: Hits = []
        present: set[int] = set()
        append, add, n = hits.append, present.add, self._n

        def on_match(i: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            if i < n:
                append((to, i))
            else:
                add(i - n)

        self._db.scan(region, match_event_handler=on_match, scratch=scratch)
        return hits, present


_CACHE: dict[tuple[tuple[bytes, ...], tuple[bytes, ...], bool], LiteralScan] = {}
_LOCK = threading.Lock()


def native_available() -> bool:
    """Whether the Hyperscan backend can be used (installed, and not switched off with
    `RELAUNCH_NATIVE_SCAN=0`)."""
    return _hyperscan() is not None


def _hyperscan() -> Any:
    if os.environ.get("RELAUNCH_NATIVE_SCAN", "1").strip() in ("0", "false", "no", "off"):
        return None
    try:
        import hyperscan
    except ImportError:
        return None
    return hyperscan


def literal_scan(every: tuple[bytes, ...], once: tuple[bytes, ...] = ()) -> LiteralScan:
    """The scanner for these literals: native where available, else the stdlib one.
    Built once per literal set (compiling is a few milliseconds)."""
    hs = _hyperscan()
    key = (every, once, hs is not None)
    got = _CACHE.get(key)
    if got is None:
        with _LOCK:
            got = _CACHE.get(key)
            if got is None:
                got = NativeScan(every, once, hs) if hs is not None else StdlibScan(every, once)
                _CACHE[key] = got
    return got


class NativeSearch:
    """Whether a regex matches anywhere in a region: one Hyperscan pass that stops at the
    first match. Hyperscan's syntax: no lookaround, no backreference."""

    def __init__(self, pattern: bytes, hs: Any) -> None:
        self._hs = hs
        db = hs.Database(mode=hs.HS_MODE_BLOCK)
        db.compile(expressions=[pattern], ids=[0], elements=1, flags=[hs.HS_FLAG_SINGLEMATCH])
        self._db = db
        self._local = threading.local()

    def __call__(self, region: bytes) -> bool:
        scratch = _thread_scratch(self._local, self._hs, self._db)
        found: list[int] = []
        self._db.scan(
            region,
            match_event_handler=lambda _i, _f, t, _fl, _c: found.append(t),
            scratch=scratch,
        )
        return bool(found)


_SEARCHES: dict[bytes, NativeSearch] = {}


def native_search(pattern: bytes) -> NativeSearch | None:
    """A `NativeSearch` for `pattern` (built once per pattern), or None where the native
    backend is not available."""
    hs = _hyperscan()
    if hs is None:
        return None
    got = _SEARCHES.get(pattern)
    if got is None:
        with _LOCK:
            got = _SEARCHES.get(pattern)
            if got is None:
                if len(_SEARCHES) >= 256:
                    _SEARCHES.clear()
                got = _SEARCHES[pattern] = NativeSearch(pattern, hs)
    return got
