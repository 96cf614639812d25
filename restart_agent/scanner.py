"""Streaming scan of one cycle log into `CycleEvidence`.

`LogScanner.feed(bytes)` accepts chunks cut anywhere (mid-line, mid-UTF-8 sequence);
`finish()` returns the evidence. `scan_file(path)` reads a file in chunks through the same
scanner, so both give identical results for any chunking.

Speed comes from never looping over lines in Python. Each region (the complete lines of
one feed) is searched with C-level byte operations only:

- `bytes.count(b"\\n")` for line numbers,
- one combined regex of the registry's cheap trigger literals (those that start with an
  upper-case letter or punctuation, so the regex engine skips most bytes with its first-
  character set) plus one `bytes.find` pass per lower-case trigger,
- `findall` over the rank prefixes (guarded by a literal test) for `ranks_seen`,
- backward `rfind` for progress (see `restart_agent.progress`).

Of the candidate lines, those no pattern row can match (warnings that merely say
`error-prone`) are dropped by `restart_agent.linegate` at the cost of a dict lookup; only
the rest are decoded and matched against the pattern table (`restart_agent.lines`).
Traceback frame lines are found between candidate lines with `bytes.find`; a run of them
and the candidate line after it go as one block (`restart_agent.blocks`), frame runs
alone as spans (`restart_agent.frames`), so dense failure output is not visited line by
line either. Lines longer than 64 KiB are cut to their first and last 32 KiB,
the same way whether they arrive in one chunk or many, so memory stays bounded (a 2 GB
file of NUL bytes without a newline is one line) and results do not depend on chunking.

Each scan has a budget (restart_agent.budget: CPU seconds, evidence lines kept), checked
at least once per MiB fed: once reached, `feed` ignores the rest and the evidence says so
(`CycleEvidence.budget`); its result is that of a scan of the bytes read until then.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import replace
from typing import Any, Literal

from relaunch.restart_agent.blocks import Blocks, frames_refused
from relaunch.restart_agent.budget import STEP, AnalysisBudget, reached
from relaunch.restart_agent.frames import Span
from relaunch.restart_agent.linegate import LineGate
from relaunch.restart_agent.lines import MAX_HEAD, READS, LineInterpreter
from relaunch.restart_agent.model import CycleEvidence, Evidence
from relaunch.restart_agent.multiscan import literal_scan, native_available
from relaunch.restart_agent.progress import ProgressTracker
from relaunch.restart_agent.ranks import RankCollector
from relaunch.restart_agent.registry import Registry, default_registry
from relaunch.restart_agent.timestamps import KEEP, span_s

HEAD = 32 * 1024  # bytes kept from the start of an over-long line
TAIL = 32 * 1024  # bytes kept from its end
_JOIN = b"\x00"  # joins head and tail of a cut line (no trigger or pattern contains it)

# Lines that give tracebacks their context; looked at even though no pattern row needs them.
CONTEXT_TRIGGERS = ('File "',)
_FRAME_STR = CONTEXT_TRIGGERS[0]
_FRAME = _FRAME_STR.encode()
_FRAME_RX = re.compile(re.escape(_FRAME))
_ZEROS = bytes.maketrans(b"123456789", b"000000000")  # the line gate's digit mask


def _env_budget() -> AnalysisBudget:
    try:
        return AnalysisBudget.from_env()
    except ValueError:  # the CLI and the service check the variables where they start
        return AnalysisBudget()


def _cut(raw: bytes) -> bytes:
    if len(raw) > HEAD + TAIL:
        return raw[:HEAD] + _JOIN + raw[-TAIL:]
    return raw


def _line_at(region: bytes, pos: int) -> tuple[int, int, bytes]:
    """(start, end, cut bytes) of the line holding `pos` (end = index of its newline)."""
    start = region.rfind(b"\n", 0, pos) + 1
    end = region.find(b"\n", pos)
    if end < 0:
        end = len(region)
    return start, end, _cut(region[start:end])


class LogScanner:
    """Incremental scanner: `feed()` chunks in order, then `finish()` once."""

    def __init__(self, registry: Registry | None = None, budget: AnalysisBudget | None = None):
        """`budget`: the analysis budget (restart_agent.budget; default: its defaults with
        the environment's overrides, the defaults where those are not numbers)."""
        self.registry = registry or default_registry()
        self.budget = budget if budget is not None else _env_budget()
        self.budget_reached: dict[str, Any] | None = None  # set once: no more is read
        self._cpu = 0.0  # CPU seconds spent in feed()
        # every occurrence of a trigger, and whether a region holds a frame line (frames are
        # found between candidates) or a progress anchor (an absent one is not searched for)
        self._every = tuple(sorted({t.encode() for t in self.registry.prefilter}))
        self._every_len = tuple(len(t) for t in self._every)
        self._progress = ProgressTracker(self.registry.dialects)
        once: tuple[bytes, ...] = (_FRAME,)
        if native_available():  # one pass finds them all: anchors cost nothing extra
            once += self._progress.anchors
        self._scan = literal_scan(self._every, once)
        self._anchors = once[1:]
        self._hint_sets: dict[bytes | frozenset[bytes], frozenset[str]] = {
            t: frozenset([t.decode()]) for t in self._every
        }
        self._interp = LineInterpreter(self.registry)
        self._gate = LineGate(self.registry, READS)
        self._blocks = Blocks(self._interp, self._gate, self._hints_of)
        self._parts: list[bytes] = []  # pieces of the pending partial line
        self._plen = 0
        self._head: bytes | None = None  # first HEAD bytes of a pending over-long line
        self._lines = 0  # complete lines processed
        self._bytes = 0
        self._ranks = RankCollector()
        self._finished: CycleEvidence | None = None
        self._frames_seen = False  # _candidates(): the region holds a frame line
        self._present: set[bytes] | None = None  # _candidates(): the progress anchors it holds
        self._ts_head = bytearray()  # first KEEP bytes of the log (timestamps.span_s)
        self._ts_tail = bytearray()  # its last KEEP bytes (and up to KEEP more)

    # ------------------------------------------------------------------ streaming
    @property
    def bytes_read(self) -> int:
        """Bytes fed and scanned (those fed after the budget was reached are not)."""
        return self._bytes

    def feed(self, chunk: bytes) -> None:
        """Scan the next bytes of the log; once the budget is reached, ignore them."""
        if self._finished is not None:
            raise RuntimeError("LogScanner.feed() after finish()")
        if self.budget_reached is not None or not chunk:
            return
        budget = self.budget
        if budget.cpu_seconds is None and budget.max_kept is None:
            self._feed(chunk)
            return
        for at in range(0, len(chunk), STEP) if len(chunk) > STEP else (0,):
            piece = chunk[at : at + STEP] if len(chunk) > STEP else chunk
            t0 = time.thread_time()
            self._feed(piece)
            self._cpu += time.thread_time() - t0
            if budget.cpu_seconds is not None and self._cpu >= budget.cpu_seconds:
                self._stop("cpu_seconds", budget.cpu_seconds)
            elif budget.max_kept is not None and self._interp.kept() >= budget.max_kept:
                self._stop("max_kept", budget.max_kept)
            if self.budget_reached is not None:
                return

    def _stop(self, limit: str, value: float) -> None:
        self.budget_reached = reached(limit, value, self._bytes, self._lines)

    def _feed(self, chunk: bytes) -> None:
        self._bytes += len(chunk)
        if b"\n" not in chunk:  # more of a pending line: collect, join lazily
            self._parts.append(chunk)
            self._plen += len(chunk)
            if self._plen > (2 * TAIL if self._head is not None else HEAD + 2 * TAIL):
                self._trim_pending()
            return
        data = b"\n" + b"".join(self._parts) + chunk if self._parts else b"\n" + chunk
        self._parts, self._plen = [], 0
        cut = data.rfind(b"\n")
        start = 0
        if self._head is not None:
            first_end = data.find(b"\n", 1)
            self._process(b"\n" + self._head + _JOIN + data[1:first_end][-TAIL:] + b"\n")
            self._head = None
            start = first_end
        if cut > start:
            self._process(data[start : cut + 1])
        rest = data[cut + 1 :]
        if rest:
            self._parts, self._plen = [rest], len(rest)
            if self._plen > HEAD + 2 * TAIL:
                self._trim_pending()

    def feed_zeros(self, n: int) -> None:
        """Same result as `feed(bytes(n))`, without building it (holes of sparse files).

        NUL bytes hold no newline and no trigger, so they only lengthen the pending line;
        of an over-long line only the head and the tail are kept, and HEAD + TAIL + 1 zeros
        already make every byte of both what n zeros would make them.
        """
        if n <= 0:
            return
        cap = HEAD + TAIL + 1
        self.feed(bytes(min(n, cap)))
        self._bytes += max(0, n - cap)

    def _trim_pending(self) -> None:
        """Keep only the head and the last TAIL bytes of an over-long pending line."""
        parts = self._parts
        if self._head is None:
            head = bytearray()
            for piece in parts:
                head += piece[: HEAD - len(head)]
                if len(head) >= HEAD:
                    break
            self._head = bytes(head)
        tail: list[bytes] = []
        n = 0
        for piece in reversed(parts):
            if n + len(piece) >= TAIL:
                tail.append(piece[len(piece) - (TAIL - n) :])
                break
            tail.append(piece)
            n += len(piece)
        pending = b"".join(reversed(tail))
        self._parts, self._plen = [pending], len(pending)

    def finish(self) -> CycleEvidence:
        if self._finished is not None:
            return self._finished
        truncated = False
        pending = b"".join(self._parts)
        if self._head is not None:
            self._process(b"\n" + self._head + _JOIN + pending[-TAIL:] + b"\n")
            truncated = True
        elif pending:
            self._process(b"\n" + pending + b"\n")
            truncated = True
        self._parts, self._plen, self._head = [], 0, None
        self._finished = self._evidence(truncated)
        return self._finished

    # ------------------------------------------------------------------ one region
    def _process(self, region: bytes) -> None:
        """`region` starts with the newline before its first line and ends with a newline."""
        base = self._lines
        # the log's first and last bytes, for its timestamps' span (each region repeats the
        # newline before it: without it they are the log's bytes whatever the chunking)
        if len(self._ts_head) < KEEP:
            self._ts_head += region[1 : 1 + KEEP - len(self._ts_head)]
        tail = self._ts_tail
        tail += region[max(1, len(region) - KEEP) :]
        if len(tail) > 2 * KEEP:  # amortised: trimmed once per KEEP bytes
            del tail[:-KEEP]
        self._ranks.region(region)
        starts, frames = self._candidates(region)
        if frames or starts:
            pos, count = self._walk(region, base, starts, frames)
        else:
            pos, count = 0, 0  # newlines before `pos`
        newlines = count + region.count(b"\n", pos)
        self._progress.region(region, base, _line_at, newlines, self._present)
        self._lines = base + newlines - 1

    def _walk(
        self, region: bytes, base: int, starts: dict[int, bytes | frozenset[bytes]], frames: bool
    ) -> tuple[int, int]:
        """Hand the candidate lines of a region to the interpreter in order, and the
        traceback frame lines between them; the last line start handed and the newlines
        before it. A run of frame lines and the candidate line after it go as one block
        where `restart_agent.blocks` can take them; other frame lines go to `_frames`. A
        candidate line is dropped when the gate says no row can match it; one whose
        outcome is known under its digit mask takes `known()`, the rest `line()`."""
        pos, count = 0, 0  # newlines before `pos`
        it = self._interp
        line, known = it.line, it.known
        take = self._blocks.take
        gate = self._gate.skip_masked
        hints_of = self._hints_of
        find = region.find
        after = 1  # start of the first line not handed yet
        for s in sorted(starts):
            found = starts[s]
            end = find(b"\n", s)
            if frames and s > after:
                f = find(_FRAME, after, s)
                if f >= 0:
                    hs = region.rfind(b"\n", after - 1, f) + 1
                    c = count + region.count(b"\n", pos, s)
                    if take(region, hs, s, end, found, base + c):
                        pos, count, after = s, c, end + 1
                        continue
                    pos, count = self._frames(region, base, after, s, pos, count)
            after = end + 1
            raw = region[s:end]
            hints: frozenset[str] | set[str] | bool
            if len(raw) > HEAD + TAIL:
                raw = _cut(raw)
                hints = self._hints(raw)
                if hints is False:
                    continue
                count += region.count(b"\n", pos, s)
                pos = s
                line(raw, base + count, hints)
                continue
            if frames and _FRAME in raw:  # a frame line with a trigger: frame context first
                count += region.count(b"\n", pos, s)
                pos = s
                if not it.frame(raw, base + count):
                    line(raw, base + count, hints_of(found) | {_FRAME_STR})
                continue
            masked = raw.translate(_ZEROS)
            if gate(masked):
                continue
            hints = hints_of(found)
            count += region.count(b"\n", pos, s)
            pos = s
            if not known(raw, masked, base + count, hints):
                line(raw, base + count, hints)
        if frames and find(_FRAME, after) >= 0:
            pos, count = self._frames(region, base, after, len(region), pos, count)
        return pos, count

    def _hints_of(self, found: bytes | frozenset[bytes]) -> frozenset[str]:
        """The triggers of a candidate line as `LineInterpreter` takes them (strings)."""
        got = self._hint_sets.get(found)
        if got is None:
            got = frozenset(t.decode() for t in found)  # type: ignore[union-attr]
            if len(self._hint_sets) < 4096:
                self._hint_sets[found] = got
        return got

    def _frames(
        self, region: bytes, base: int, a: int, b: int, pos: int, count: int
    ) -> tuple[int, int]:
        """The traceback frame lines among the lines `region[a:b]` (no candidate among
        them). Where every line there holding `File "` holds it once, right after the same
        head, and nothing `frame()` refuses is there (`blocks.frames_refused`), `frame()`
        would take each one for the same rank: they go over as one span
        (`restart_agent.frames`), with a few C-level searches and no loop over them.
        Otherwise each goes to `frame()` (or `line()`) as a candidate would."""
        f = region.find(_FRAME, a, b)
        hs = region.rfind(b"\n", a - 1, f) + 1
        head = region[hs:f]
        n = region.count(_FRAME, a, b)
        got = None
        if (
            len(head) <= MAX_HEAD
            and region.count(b"\n" + head + _FRAME, a - 1, b) == n
            and not frames_refused(region[hs:b], head)
        ):
            got = self._interp.frame_head(head)
        if got is not None:
            end = region.find(b"\n", region.rfind(_FRAME, a, b))
            count += region.count(b"\n", pos, hs)
            pos = hs
            self._interp.add_span(got[0], Span(base + count, region[hs:end], len(head), n))
            return pos, count
        it = self._interp
        s0 = -1
        for m in _FRAME_RX.finditer(region, a, b):
            s = region.rfind(b"\n", 0, m.start()) + 1
            if s == s0:
                continue
            s0 = s
            raw = region[s : region.find(b"\n", s)]
            count += region.count(b"\n", pos, s)
            pos = s
            if len(raw) > HEAD + TAIL:
                raw = _cut(raw)
                hints = self._hints(raw)
                if hints is not False:
                    it.line(raw, base + count, hints)
            elif not it.frame(raw, base + count):
                it.line(raw, base + count, {_FRAME_STR})
        return pos, count

    def _candidates(self, region: bytes) -> tuple[dict[int, bytes | frozenset[bytes]], bool]:
        """(line start -> the trigger found in that line, a frozenset when several are;
        whether the region holds a traceback frame line), from one `multiscan` pass, which
        also tells which progress anchors the region holds (`_present`). Frame lines are
        found between candidates, by `_walk`."""
        hits, present = self._scan.scan(region)
        self._frames_seen = 0 in present
        if self._anchors:
            anchors = self._anchors
            self._present = {anchors[i - 1] for i in present if i}
        starts: dict[int, bytes | frozenset[bytes]] = {}
        rfind = region.rfind
        get = starts.get
        every, lens = self._every, self._every_len
        for end, i in hits:
            s = rfind(b"\n", 0, end - lens[i]) + 1
            t = every[i]
            got = get(s)
            if got is None:
                starts[s] = t
            elif got != t:
                starts[s] = got | {t} if isinstance(got, frozenset) else frozenset((got, t))
        return starts, self._frames_seen

    def _hints(self, raw: bytes) -> set[str] | Literal[False]:
        """Like `_candidates` for one (cut) line: the triggers in it, or False."""
        found = {t.decode() for t in self._every if t in raw}
        if _FRAME in raw:
            found.add(_FRAME_STR)
        return found or False

    # ------------------------------------------------------------------ result
    def _evidence(self, truncated: bool) -> CycleEvidence:
        it = self._interp
        primary, reason = choose_primary(it.roots, it.cascade_evidence, it.first_teardown_line)
        lines = self._lines
        return CycleEvidence(
            primary=primary,
            roots=list(it.roots),
            cascades=it.cascades(),
            diagnostics=list(it.diagnostics),
            progress=replace(
                self._progress.result(),
                log_span_s=span_s(bytes(self._ts_head), bytes(self._ts_tail[-KEEP:])),
            ),
            ranks_seen=sorted(self._ranks.ranks),
            failed_ranks=sorted(it.failed_ranks),
            nodes=sorted(it.nodes),
            lines=lines,
            bytes=self._bytes,
            truncated_last_line=truncated,
            budget=self.budget_reached,
            cascade_evidence=list(it.cascade_evidence),
            first_teardown_line=it.first_teardown_line,
            primary_reason=reason,
            root_lines=it.root_count,
            **it.extras(),
        )


def choose_primary(
    roots: list[Evidence],
    cascades: list[Evidence],
    first_teardown_line: int | None,
    culprit_ranks: set[int] | None = None,
) -> tuple[Evidence | None, str]:
    """The initiating failure: earliest root (before teardown began), else a cascade.

    With Flight Recorder culprit ranks, roots and cascades on those ranks come first.
    """
    if culprit_ranks:
        on_culprit = [e for e in roots if e.rank in culprit_ranks]
        if on_culprit:
            return on_culprit[0], "earliest root on a Flight Recorder culprit rank"
    if roots:
        if first_teardown_line is not None:
            before = [e for e in roots if e.line < first_teardown_line]
            if before:
                return before[0], "earliest root before teardown began"
            non_cascade_free = [e for e in cascades if e.role == "cascade"]
            if non_cascade_free and non_cascade_free[0].line < roots[0].line:
                return non_cascade_free[0], "earliest cascade: the only roots came after teardown"
            return roots[0], "earliest root (all roots came after teardown began)"
        return roots[0], "earliest root"
    only_cascades = [e for e in cascades if e.role == "cascade"]
    if culprit_ranks:
        on_culprit = [e for e in only_cascades if e.rank in culprit_ranks]
        if on_culprit:
            return on_culprit[0], "cascade on a Flight Recorder culprit rank (no root in the log)"
    if only_cascades:
        return only_cascades[0], "earliest cascade (no root-capable line in the log)"
    teardown = [e for e in cascades if e.role == "teardown"]
    if teardown:
        return teardown[0], "earliest teardown line (nothing else matched)"
    return None, "no failure evidence"


def scan_file(
    path: str | os.PathLike[str], chunk_size: int = 1 << 20, budget: AnalysisBudget | None = None
) -> CycleEvidence:
    """Scan a log file in chunks. Raises the OS error (FileNotFoundError, ...) unchanged.
    `budget`: as `LogScanner`'s; reading stops where it is reached.

    Holes of sparse files are skipped with SEEK_DATA/SEEK_HOLE where the OS has them
    (they read as NUL bytes; `feed_zeros` accounts for them exactly).
    """
    if chunk_size <= 0:
        raise ValueError("chunk_size must be positive")
    scanner = LogScanner(budget=budget)
    # unbuffered: os.lseek(SEEK_DATA) moves the descriptor, a buffer would go stale
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        pos = 0
        sparse = hasattr(os, "SEEK_DATA") and size > chunk_size
        while True:
            if sparse:
                try:
                    data_at = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError:  # ENXIO: only a hole is left (or no SEEK_DATA support)
                    data_at = size if pos < size else pos
                if data_at > pos:
                    scanner.feed_zeros(min(data_at, size) - pos)
                    pos = min(data_at, size)
                f.seek(pos)
            chunk = f.read(chunk_size)
            if not chunk:
                break
            scanner.feed(chunk)
            pos += len(chunk)
            if scanner.budget_reached is not None:  # the verdict is made on what was read
                break
    return scanner.finish()
