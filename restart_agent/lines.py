"""Per-line interpretation of candidate lines: patterns, traceback context, evidence.

The scanner (`restart_agent.scanner`) finds the few lines worth looking at with C-level
byte searches and hands each one here, in log order, with its 1-based line number.
`LineInterpreter` decodes it, splits the rank prefix, keeps the traceback frames of each
rank apart (tracebacks of several ranks interleave) and turns pattern matches into
`Evidence`, folding cascades into counts. It also hands the launcher's fact lines to
`restart_agent.facts` and torch elastic's exit reports to `restart_agent.elastic`, and
records how each evidence line's rank was known (`rank_source`).

Dense failure output (every rank printing a traceback) is cheap: the scanner hands runs
of one rank's frame lines over as byte spans (`add_span`, restart_agent.frames), other
frame lines take `frame()`, which remembers what each line head says and keeps the frame
undecoded; an error line whose outcome is known under its digit mask takes `known()`
(restart_agent.outcomes); evidence is built only when kept. Kept evidence repeats itself
too (every rank's traceback has the same frames, its message differs in digits only): what
a traceback's frame texts say (`frame_facts`) and whether a message names no entity
(`remembered_entity`) are remembered, bounded.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from relaunch.restart_agent.elastic import MESSAGE as ELASTIC_MESSAGE
from relaunch.restart_agent.elastic import ElasticReader
from relaunch.restart_agent.facts import PREFIX as FACT_PREFIX
from relaunch.restart_agent.facts import FactCollector
from relaunch.restart_agent.fingerprint import MAX_INPUT, entity_of
from relaunch.restart_agent.frames import (
    MAX_FRAMES,
    MAX_TEXT,
    PendingSpan,
    Span,
    Trace,
    frame_text,
    span_of,
    started,
)
from relaunch.restart_agent.model import CascadeGroup, Evidence
from relaunch.restart_agent.outcomes import (
    ELASTIC_WORDS,
    MESSAGE_RANK,
    NOTHING,
    SRUN_TASK,
    Outcomes,
)
from relaunch.restart_agent.outcomes import TRACEBACK as _TRACEBACK
from relaunch.restart_agent.prefixes import _LEAD_WINDOW, _PY_BODY, bounded_int, split_prefix
from relaunch.restart_agent.registry import PatternRow, Registry
from relaunch.restart_agent.rowcache import RowSelector, fingerprint  # cached per line (speed)
from relaunch.restart_agent.structural import lean, structural
from relaunch.restart_agent.taxonomy import taxonomy

MAX_ROOTS = 4096  # first root per (rank, fingerprint), bounded
MAX_CASCADE_EVIDENCE = 4096  # first cascade per (class, rank), bounded
MAX_DIAGNOSTICS = 64
__all__ = ["ELASTIC_WORDS", "MAX_FRAMES", "MAX_TEXT", "READS", "LineInterpreter"]

# Literals of every line `line()` reads besides pattern matches: traceback headers and
# frames, launcher facts, torch elastic's exit reports. The scanner's line gate
# (restart_agent.linegate) never drops a line holding one; keep this in step with `line()`.
READS = ("Traceback (most recent call last):", 'File "', FACT_PREFIX, *ELASTIC_WORDS)
_ELASTIC = re.compile("|".join(re.escape(w) for w in ELASTIC_WORDS))
_FRAME_BYTES = b'File "'
# frame(): lines left to line() (NUL, CR, a word of torch elastic's reports)
_FRAME_SKIP = re.compile(b"[\\x00\\r]|" + "|".join(re.escape(w) for w in ELASTIC_WORDS).encode())
_HEAD_SKIP = re.compile(b"[\\x00\\r]")
_LAZY_FRAME = MAX_TEXT  # frame(): bytes of a frame kept undecoded (no more than line() keeps)
MAX_HEADS = 1 << 12  # distinct line heads (and frame tails) remembered
MAX_HEAD = 256  # longer heads are not remembered (bounds the memory)
_FRAME = re.compile(r'^File "(?P<path>[^"]+)", line (?P<line>\d+)(?:, in (?P<fn>.+))?')
# where a rank-prefixed line starts inside a physical line (line breaks lost in a paste)
_FLATTENED = re.compile(r"(?<=\S) +(?=\[rank\d{1,7}\]: )")
# where a traceback's next line starts inside one physical line: its frames and its
# exception line (`TypeError: ...`, `pkg.SomeError: ...`)
_FLAT_TRACEBACK = re.compile(
    r'(?<=\S) +(?=File "|(?<![\w.])(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception): )'
)
_MESSAGE_RANK = MESSAGE_RANK
_SRUN_TASK = SRUN_TASK
_LIBRARY = re.compile(r"site-packages|dist-packages|/lib/python\d|<frozen |^<|/torch/|/usr/lib/")
_frame_text = frame_text


def is_user_frame(path: str) -> bool:
    """A traceback frame of the user's own code (not the stdlib, torch or an installed lib)."""
    return not _LIBRARY.search(path)


class FrameFacts(NamedTuple):
    """What `_evidence` reads from a traceback's frames, given only their texts."""

    texts: tuple[str, ...]  # each frame's text (`frame_text`)
    functions: list[str]  # the function of each frame line (`taxonomy().validates_config`)
    user_frame: str | None  # "path:line" of the innermost frame of the user's code


def frame_facts(raws: tuple[str | bytes, ...]) -> FrameFacts:
    """The `FrameFacts` of frames kept as `raws` (`Trace.frames()`'s texts, in order)."""
    texts = tuple(_frame_text(t) for t in raws)
    fns = [fm.group("fn") or "" for t in texts if (fm := _FRAME.match(t))]
    user_frame = None
    for t in reversed(texts):
        fm = _FRAME.match(t)
        if fm and is_user_frame(fm.group("path")):
            user_frame = f"{fm.group('path')}:{fm.group('line')}"
            break
    return FrameFacts(texts, fns, user_frame)


MAX_MEMO = 1 << 8  # distinct frame lists remembered (each up to MAX_FRAMES + 1 texts)
MAX_ENTITY_MEMO = 1 << 12  # distinct messages (digits masked) remembered
_FACTS: dict[tuple[str | bytes, ...], FrameFacts] = {}
_NO_ENTITY: dict[bytes, bool] = {}
_DIGITS = bytes.maketrans(b"123456789", b"000000000")


def remembered_frame_facts(raws: tuple[str | bytes, ...]) -> FrameFacts:
    """`frame_facts(raws)`, remembered per raws (a pure function of them; bounded)."""
    got = _FACTS.get(raws)
    if got is None:
        got = frame_facts(raws)
        if len(_FACTS) >= MAX_MEMO:
            _FACTS.clear()
        _FACTS[raws] = got
    return got


def remembered_entity(body: str) -> str | None:
    """`entity_of(body)`, with messages that name no entity remembered by their digit mask
    (every ASCII digit as 0): entity_of's regexes treat all ASCII digits alike (a test
    checks they are `digit_blind`), so whether they find anything, and so whether it
    returns None, is the same for every message of that mask."""
    if len(body) > MAX_INPUT:
        return entity_of(body)
    key = body.encode("utf-8", "surrogatepass").translate(_DIGITS)
    none = _NO_ENTITY.get(key)
    if none:
        return None
    got = entity_of(body)
    if none is None:
        if len(_NO_ENTITY) >= MAX_ENTITY_MEMO:
            _NO_ENTITY.clear()
        _NO_ENTITY[key] = got is None
    return got


# what `_evidence` calls; the speed tests' slow reference puts `frame_facts` and
# `entity_of` in their place (nothing remembered)
_facts = remembered_frame_facts
_entity = remembered_entity


class _Miss(enum.Enum):
    """A cache miss, where None and False are cached values."""

    MISS = 0


@dataclass
class _Group:
    failure_class: str
    role: str
    count: int
    ranks: set[int]
    first_line: int
    example: str


@dataclass
class LineInterpreter:
    registry: Registry
    roots: list[Evidence] = field(default_factory=list)
    cascade_evidence: list[Evidence] = field(default_factory=list)
    diagnostics: list[Evidence] = field(default_factory=list)
    failed_ranks: set[int] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)
    first_teardown_line: int | None = None
    root_count: int = 0
    _groups: dict[tuple[str, str], _Group] = field(default_factory=dict)
    _root_keys: set[tuple[int | None, str]] = field(default_factory=set)
    _cascade_keys: set[tuple[str, int | None]] = field(default_factory=set)
    # the current traceback's frames per rank (restart_agent.frames)
    _tb: dict[int | None, Trace] = field(default_factory=dict)
    _selector: RowSelector | None = None
    _outcomes: Outcomes | None = None
    # frame(): what the part of a frame line before `File "` says (see there)
    _heads: dict[bytes, tuple[int | None, bool] | None] = field(default_factory=dict)
    _tails: dict[bytes, bool] = field(default_factory=dict)  # frame(): the rest of the line
    _splits: dict[str, tuple[int | None, int] | None] = field(default_factory=dict)
    facts: FactCollector = field(default_factory=FactCollector)
    elastic: ElasticReader = field(default_factory=ElasticReader)

    def extras(self) -> dict[str, Any]:
        """The `CycleEvidence` fields this interpreter adds: launcher facts, process exits."""
        return {"launcher": self.facts.result(), "exits": self.elastic.result()}

    def kept(self) -> int:
        """Evidence lines kept so far (roots, cascade evidence, diagnostics: each bounded)."""
        return len(self.roots) + len(self.cascade_evidence) + len(self.diagnostics)

    def frame(self, raw: bytes, lineno: int) -> bool:
        """`line(raw, lineno)` for a traceback frame line, without re-parsing its prefix.

        `prefixes.split_prefix` decides the rank and where the body starts from the part of
        the line before `File "` (the head) and at most the few characters after it, which
        are `File "` on every such line (a launcher line's `rank=N`, searched in the whole
        line, is left to `line()`); whether the line is a launcher fact is decided by the
        head too (the fact prefix holds no `File "`). What the head said is remembered
        (bounded); the line's bytes from `File "` on are appended to its rank's traceback,
        decoded only if they become the context of kept evidence (`_frame_text`). False
        (nothing done) for lines `line()` treats otherwise or may rewrite: a NUL or CR, a
        word of torch elastic's reports, a non-ASCII head, a body not starting with it, a
        long line.
        """
        i = raw.find(_FRAME_BYTES)
        if i < 0 or i > MAX_HEAD or len(raw) - i > _LAZY_FRAME:
            return False
        tail = raw[i:]  # no word _FRAME_SKIP looks for can span head and tail (none has F)
        fine = self._tails.get(tail)
        if fine is None:
            fine = not _FRAME_SKIP.search(tail)
            if len(self._tails) >= MAX_HEADS:
                self._tails.clear()
            self._tails[tail] = fine
        if not fine:
            return False
        got = self.frame_head(raw[:i])
        if got is None:
            return False
        key = got[0]
        frames = self._tb.get(key)
        if frames is None:
            self._tb[key] = started(lineno, tail)
        else:
            frames.add(lineno, tail)
        return True

    def frame_head(self, head: bytes) -> tuple[int | None, bool] | None:
        """What `frame()` makes of a frame line's head (the bytes before `File "`): (rank,
        True), or None when such lines go to `line()`. Remembered per head."""
        got = self._heads.get(head, _Miss.MISS)
        if got is _Miss.MISS:
            got = None
            # NUL or CR: line() rewrites the line; the head is not in the body, so torch
            # elastic's words there (`[rank 3]:`) do not matter
            if len(head) <= MAX_HEAD and head.isascii() and not _HEAD_SKIP.search(head):
                text = (head + _FRAME_BYTES).decode()
                split = split_prefix(text)
                start = len(text) - len(split.body)
                i = len(head)
                ok = not split.launcher and not text.startswith(FACT_PREFIX)
                if ok and not text[start:i].strip():
                    got = split.rank, True
            if len(self._heads) >= MAX_HEADS:
                self._heads.clear()
            self._heads[head] = got
        return got

    def add_span(self, key: int | None, span: Span) -> None:
        """Frame lines of rank `key` that the scanner verified `frame()` would take one by
        one (same head, see `restart_agent.scanner`), as one span."""
        frames = self._tb.get(key)
        if frames is None:
            frames = self._tb[key] = Trace()
        frames.add_span(span)

    def outcomes(self) -> Outcomes:
        got = self._outcomes
        if got is None:
            selector = self._selector
            if selector is None:
                selector = self._selector = RowSelector(self.registry)
            got = self._outcomes = Outcomes(selector)
        return got

    def known(self, raw: bytes, masked: bytes, lineno: int, hints: frozenset[str] | None) -> bool:
        """`line(raw, lineno, hints)` for a line whose outcome is known under its digit mask
        `masked` (restart_agent.outcomes); False (nothing done) when it is not."""
        outcomes = self._outcomes or self.outcomes()
        got = outcomes.get(raw, masked, hints)
        if got is None:
            return False
        if got is not NOTHING:
            self.apply(got, raw, lineno)
        return True

    def apply(
        self,
        got: tuple[Any, ...],
        raw: bytes,
        lineno: int,
        span_key: int | None = None,
        span: PendingSpan | None = None,
    ) -> None:
        """What `line(raw, lineno)` does for a line whose outcome `got` matched a row
        (restart_agent.outcomes). `span`: frame lines of rank `span_key` right before the
        line, not handed over yet (`add_span`); made into a `Span` only if it is kept (as
        this line's context, or for a later line of that rank)."""
        row, bs, be, ka, ke, ra, re_, source, ms, me, na, ne, fp, _ = got
        key = int(raw[ka:ke]) if ka >= 0 else None
        if span is not None and span_key != key:
            self.add_span(span_key, span_of(span))
            span = None
        rank = key if ra == ka else int(raw[ra:re_])
        if fp is None:
            fp = fingerprint(row.failure_class, raw[ms:me].decode("ascii"))
        node = raw[na:ne].decode("ascii") if na >= 0 else None
        frames = self._tb.pop(key, None)
        body = None
        if row.role == "root":  # `_count` for a root, inlined (dense output: most lines)
            if node:
                self.nodes.add(node)
            self.root_count += 1
            if rank is not None:
                self.failed_ranks.add(rank)
            if (rank, fp) in self._root_keys or len(self.roots) >= MAX_ROOTS:
                return
        else:
            body = raw[bs:be].decode("ascii")
            if not self._count(row, rank, fp, node, lineno, body):
                return
        self._kept(got, body or raw[bs:be].decode("ascii"), lineno, rank, fp, node, frames, span)

    def counted_root(
        self, got: tuple[Any, ...], raw: bytes, lineno: int, rank: int, span: PendingSpan
    ) -> None:
        """`apply()` for a simple root (outcome flag: the prefix's rank, no node, a known
        fingerprint) whose prefix rank is `rank`, that of the frames `span` before it."""
        fp = got[12]
        self.root_count += 1
        self.failed_ranks.add(rank)
        frames = self._tb.pop(rank, None)
        if (rank, fp) in self._root_keys or len(self.roots) >= MAX_ROOTS:
            return
        self._kept(got, raw[got[1] : got[2]].decode("ascii"), lineno, rank, fp, None, frames, span)

    def _kept(
        self,
        got: tuple[Any, ...],
        body: str,
        lineno: int,
        rank: int | None,
        fp: str,
        node: str | None,
        frames: Trace | None,
        span: PendingSpan | None,
    ) -> None:
        """Build and keep the evidence of a line `apply()` counted."""
        row, source = got[0], got[7]
        if span is not None:
            frames = frames or Trace()
            frames.add_span(span_of(span))
        groups: dict[str, str | None] = {}
        if "entity" in row.regex.groupindex:  # the only group `_evidence` reads
            m = row.regex.search(body)
            assert m is not None  # the outcome says this row matches (same offsets)
            groups = m.groupdict()
        self._keep(self._evidence(row, body, lineno, rank, source, fp, node, groups, frames))

    def line(self, raw: bytes, lineno: int, hints: set[str] | frozenset[str] | None = None) -> None:
        """One candidate line; `hints`: the only literal triggers it holds, if known."""
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        if text.count("[rank") > 2 and len(parts := _FLATTENED.split(text)) > 2:
            # a paste that lost its line breaks: `[rank5]: Traceback ... [rank5]: File ...
            # [rank5]: TypeError: ...` on one line is read as the lines it was
            for part in parts:
                self._text(part, lineno, None)
            return
        if _TRACEBACK in text and 'File "' in text:
            # a whole traceback on one line (`Traceback (most recent call last): File "a.py",
            # line 3, in f ... TypeError: x`): read as its lines, each behind the line's prefix
            split = split_prefix(text)
            lead = text[: len(text) - len(split.body)]
            parts = _FLAT_TRACEBACK.split(split.body)
            if len(parts) > 2:
                for part in parts:
                    self._text(lead + part, lineno, None)
                return
        self._text(text, lineno, hints)

    def _text(self, text: str, lineno: int, hints: set[str] | frozenset[str] | None) -> None:
        if text.startswith(FACT_PREFIX):  # only an unprefixed line can be a launcher fact
            self.facts.line(text, lineno)
            return
        launcher = False
        if "\r" in text:  # progress bars redraw with bare CR: keep the last state
            text = text.rsplit("\r", 1)[-1] or text.replace("\r", " ")
            got = None
        else:
            got = self._split_by_head(text, hints)
        if got is None:
            split = split_prefix(text)
            key, body, launcher = split.rank, split.body, split.launcher
        else:
            key, body = got[0], text[got[1] :]
        unprefixed = launcher and body == text.lstrip()
        body = body.strip().replace("\x00", "")
        if not body:
            return
        block = None
        if _ELASTIC.search(body):
            block = self.elastic.line(body, lineno)
            jm = ELASTIC_MESSAGE.match(body)
            if jm:  # torch 1.9's summary: the entry's error, JSON-escaped
                body = jm.group("text").replace('\\"', '"').replace("\\n", " ")[:MAX_TEXT]
        if body.startswith(_TRACEBACK):
            self._tb[key] = started(lineno, body[:MAX_TEXT])
            return
        if body.startswith('File "'):
            frames = self._tb.get(key)
            if frames is None:  # header not seen (not a trigger): the first frame opens it
                self._tb[key] = started(lineno, body[:MAX_TEXT])
            else:
                frames.add(lineno, body[:MAX_TEXT])
            return
        selector = self._selector
        if selector is None:
            selector = self._selector = RowSelector(self.registry)
        for row in selector.rows_for(body, hints):
            m = row.regex.search(body)
            if m is None:
                continue
            groups = m.groupdict()
            msg = groups.get("msg") or m.group(0)
            rank, source = key, None
            if rank is not None:
                source = "launcher" if unprefixed else "prefix"
            if rank is None and groups.get("rank"):
                rank = bounded_int(groups["rank"])
                source = row.rank_source if rank is not None else None
            if rank is None and block is not None:
                rank, source = block
            if rank is None and body.startswith("srun: error:"):
                sm = _SRUN_TASK.match(body)
                if sm:
                    rank, source = int(sm.group(1)), "message"
            if rank is None and "Rank" in body:
                rm = _MESSAGE_RANK.search(body)
                if rm:
                    rank, source = int(rm.group(1)), "message"
            node = groups.get("node")
            frames = self._tb.pop(key, None)
            fp = fingerprint(row.failure_class, msg)
            if not self._count(row, rank, fp, node, lineno, body):
                return  # counted; the evidence itself is not kept (same rank, same message)
            self._keep(self._evidence(row, body, lineno, rank, source, fp, node, groups, frames))
            return

    def _split_by_head(
        self, text: str, hints: set[str] | frozenset[str] | None
    ) -> tuple[int | None, int] | None:
        """(rank, where the body starts) of `prefixes.split_prefix(text)`, remembered per
        head: the text up to and including its one trigger. The prefix regexes cannot
        consume a trigger's characters (a trigger starting with `[` is left out), so they
        decide within the head; a launcher line (whose `rank=N` is searched in the whole
        line) is left out. None: not known this way, call `split_prefix`."""
        if hints is None or len(hints) != 1:
            return None
        (t,) = hints
        p = text.find(t)
        if p < 0 or p > MAX_HEAD or t.startswith("["):
            return None
        head = text[: p + len(t)]
        if _PY_BODY.search(text, p + len(t), _LEAD_WINDOW):
            return None  # a generic lead may end behind the head: split_prefix decides
        got = self._splits.get(head, _Miss.MISS)
        if got is _Miss.MISS:
            split = split_prefix(text)
            start = len(text) - len(split.body)
            # a generic lead's end may depend on the text after the head: not remembered
            got = None if split.launcher or split.generic or start > p else (split.rank, start)
            if len(self._splits) >= MAX_HEADS:
                self._splits.clear()
            self._splits[head] = got
        return got

    def _evidence(
        self,
        row: PatternRow,
        body: str,
        lineno: int,
        rank: int | None,
        source: str | None,
        fp: str,
        node: str | None,
        groups: dict[str, str | None],
        trace: Trace | None,
    ) -> Evidence:
        """The evidence of a matched line (built only for evidence that is kept)."""
        context: list[dict[str, object]] = []
        user_frame = None
        recoverability = row.recoverability
        domain = row.domain
        texts: tuple[str, ...] = ()
        if trace is not None:
            frames = trace.frames()
            facts = _facts(tuple([t for _, t in frames]))
            texts = facts.texts
            context = [{"line": f[0], "text": t} for f, t in zip(frames, facts.texts, strict=True)]
            if taxonomy().validates_config(row.id, facts.functions):
                recoverability = "config"
            user_frame = facts.user_frame
        if (
            recoverability != "config"
            and taxonomy().validates_config_message(row.id, body)
            and structural().infra_words.search(body) is None
        ):
            # a config-speaking message, unless it also holds a device/network/storage word
            # (`could not read the config: connection reset`): that one leans RESTART
            recoverability = "config"
        basis = None
        if recoverability != "config" and row.id in structural().rows:
            got = lean(body, list(texts), user_frame)
            domain, recoverability, basis = got.domain, got.recoverability, got.basis
        hint = groups.get("entity")
        entity = hint.strip() if hint else None
        if entity is None:
            if user_frame is not None and "/" not in body:
                # entity_of gives a part of the body, so none starting with "/": the frame
                entity = user_frame
            else:
                quoted = _entity(body)
                keep = quoted and (quoted.startswith("/") or user_frame is None)
                entity = (quoted if keep else None) or user_frame
        return Evidence(
            line=lineno,
            rank=rank,
            pattern_id=row.id,
            failure_class=row.failure_class,
            domain=domain,  # type: ignore[arg-type]
            role=row.role,  # type: ignore[arg-type]
            recoverability=recoverability,
            text=body[:MAX_TEXT],
            fingerprint=fp,
            entity=entity,
            node=node,
            context=context,
            user_frame=user_frame,
            rank_source=source,
            structural=basis,
        )

    def _count(
        self, row: PatternRow, rank: int | None, fp: str, node: str | None, lineno: int, body: str
    ) -> bool:
        """Count one matched line; True when its evidence is to be kept (`_keep`)."""
        if node:
            self.nodes.add(node)
        role = row.role
        if role == "root":
            self.root_count += 1
            if rank is not None:
                self.failed_ranks.add(rank)
            return (rank, fp) not in self._root_keys and len(self.roots) < MAX_ROOTS
        if role in ("cascade", "teardown"):
            fc = row.failure_class
            if rank is not None and role == "cascade":
                self.failed_ranks.add(rank)
            if role == "teardown" and self.first_teardown_line is None:
                self.first_teardown_line = lineno
            g = self._groups.get((fc, role))
            if g is None:
                g = self._groups[(fc, role)] = _Group(fc, role, 0, set(), lineno, body[:MAX_TEXT])
            g.count += 1
            if rank is not None:
                g.ranks.add(rank)
            return (fc, rank) not in self._cascade_keys and (
                len(self.cascade_evidence) < MAX_CASCADE_EVIDENCE
            )
        return len(self.diagnostics) < MAX_DIAGNOSTICS

    def _keep(self, ev: Evidence) -> None:
        """Keep the evidence `_count` chose."""
        if ev.role == "root":
            self._root_keys.add((ev.rank, ev.fingerprint))
            self.roots.append(ev)
        elif ev.role in ("cascade", "teardown"):
            self._cascade_keys.add((ev.failure_class, ev.rank))
            self.cascade_evidence.append(ev)
        else:
            self.diagnostics.append(ev)

    def cascades(self) -> list[CascadeGroup]:
        groups = sorted(self._groups.values(), key=lambda g: g.first_line)
        return [
            CascadeGroup(
                failure_class=g.failure_class,
                role=g.role,  # type: ignore[arg-type]
                count=g.count,
                ranks=sorted(g.ranks),
                first_line=g.first_line,
                example=g.example,
            )
            for g in groups
        ]
