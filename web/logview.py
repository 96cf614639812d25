"""Reading a cycle's log for the dashboard: excerpts, pages of lines, and a bounded tail.

Callers pass a binary file opened through the service's confined opener (the router's
`log_access` gives a descriptor: no symlink followed, regular files only); this module
only reads from it, and every read is bounded (bytes scanned, lines returned, characters
per line). Line numbers are 1-based, as the analysis reports them.

- `excerpt(fh, line, rank)` — the lines around the primary evidence line: the traceback
  of that rank (from its last `Traceback (most recent call last):` up to the line) and the
  context, where runs of other ranks' lines are grouped so the page can fold them;
- `page(fh, start, count)` — lines `start..start+count-1` (the raw log view);
- `last_lines(fh, count)` — the last lines with their numbers and the end offset, where
  following a running log starts;
- `tail(fh, offset)` — the complete lines written after byte `offset`.
"""

from __future__ import annotations

import os
import re
from typing import Any, BinaryIO

MAX_SCAN_BYTES = 512 << 20  # never read further into a log than this
MAX_LINE_CHARS = 4000
MAX_LINE_BYTES = 1 << 20  # a longer line is read (and numbered) in pieces
MAX_PAGE_LINES = 2000
TAIL_CHUNK = 64 << 10
_RANK = re.compile(r"^\s*\[(?:rank|default)\s?(\d+)\]:")
_TRACEBACK = "Traceback (most recent call last)"
_CHUNK = 1 << 20


class LogUnavailable(Exception):
    """The log cannot be shown: `status` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def line_rank(text: str) -> int | None:
    """The rank of a torchrun-prefixed line (`[rank3]: ...`, `[default3]: ...`), else None."""
    m = _RANK.match(text)
    return int(m.group(1)) if m else None


def _decode(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
    return text if len(text) <= MAX_LINE_CHARS else text[:MAX_LINE_CHARS] + " …[cut]"


def _lines(fh: BinaryIO, first: int, last: int) -> list[tuple[int, str]]:
    """Lines first..last (1-based, inclusive) of the file, reading at most MAX_SCAN_BYTES."""
    out: list[tuple[int, str]] = []
    read = 0
    fh.seek(0)
    for n, raw in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES), b""), start=1):
        read += len(raw)
        if n >= first:
            out.append((n, _decode(raw)))
        if n >= last or read > MAX_SCAN_BYTES:
            break
    return out


def page(fh: BinaryIO, start: int, count: int) -> dict[str, Any]:
    """Lines start..start+count-1, and whether the log goes on after them."""
    start, count = max(1, start), max(1, min(count, MAX_PAGE_LINES))
    lines = _lines(fh, start, start + count)  # one more: is there a next page?
    more = len(lines) > count
    return {"lines": lines[:count], "start": start, "more": more, "size": _size(fh)}


def _size(fh: BinaryIO) -> int:
    return os.fstat(fh.fileno()).st_size


def excerpt(
    fh: BinaryIO, line: int, rank: int | None, before: int = 40, after: int = 12
) -> dict[str, Any]:
    """The traceback of `rank` ending at `line`, the context around `line` (that rank's
    lines and lines without a rank prefix) and, apart, the other ranks' lines in the same
    range (`others`, for the page to fold). `more_context` says whether the context has
    lines the traceback does not."""
    lines = _lines(fh, max(1, line - before), line + after)

    def own(text: str) -> bool:
        r = line_rank(text)
        return rank is None or r is None or r == rank

    traceback: list[tuple[int, str]] = []
    for i in range(len(lines) - 1, -1, -1):
        n, text = lines[i]
        if n > line or not own(text):
            continue
        if _TRACEBACK in text:
            traceback = [(m, t) for m, t in lines[i:] if m <= line and own(t)]
            break
    context = [(n, t) for n, t in lines if own(t) or n == line]
    others = [(n, t) for n, t in lines if not (own(t) or n == line)]
    other_ranks = sorted({r for _, t in others if (r := line_rank(t)) is not None})
    found = any(n == line for n, _ in lines)
    in_traceback = {n for n, _ in traceback}
    return {
        "traceback": traceback,
        "context": context,
        "others": others,
        "other_ranks": other_ranks,
        "line": line,
        "found": found,
        # own lines beyond the traceback: show the context too
        "more_context": any(n not in in_traceback for n, _ in context),
        "first": lines[0][0] if lines else line,
        "last": lines[-1][0] if lines else line,
    }


def last_lines(fh: BinaryIO, count: int) -> dict[str, Any]:
    """The last `count` lines (numbered), and the byte offset after the last complete line."""
    count = max(1, min(count, MAX_PAGE_LINES))
    total = 0
    end = 0  # offset after the last newline
    size = _size(fh)
    fh.seek(0)
    pos = 0
    while pos < min(size, MAX_SCAN_BYTES):
        chunk = fh.read(_CHUNK)
        if not chunk:
            break
        nl = chunk.count(b"\n")
        if nl:
            total += nl
            end = pos + chunk.rfind(b"\n") + 1
        pos += len(chunk)
    # read backwards from `end` until `count` lines are in hand
    back = min(end, TAIL_CHUNK)
    while True:
        fh.seek(end - back)
        data = fh.read(back)
        parts = data.split(b"\n")[:-1]  # complete lines only
        if len(parts) > count or back >= end:
            break
        back = min(end, back * 4)
    if back < end:
        parts = parts[1:]  # the first piece may be a partial line
    parts = parts[-count:]
    first = total - len(parts) + 1
    return {
        "lines": [(first + i, _decode(p)) for i, p in enumerate(parts)],
        "offset": end,
        "next_line": total + 1,
        "size": size,
    }


def tail(fh: BinaryIO, offset: int, limit: int = TAIL_CHUNK) -> dict[str, Any]:
    """Complete lines written after byte `offset` (at most `limit` bytes of them).

    `reset` is true when the log is now shorter than `offset` (truncated or replaced):
    the reader should start again from the beginning."""
    size = _size(fh)
    if offset > size:
        return {"reset": True, "offset": offset, "next_offset": 0, "lines": [], "size": size}
    fh.seek(offset)
    data = fh.read(limit)
    cut = data.rfind(b"\n") + 1
    if cut == 0 and len(data) >= limit:  # one line longer than the limit: pass it in pieces
        cut = len(data)
    body = data[:cut]
    lines = [_decode(x) for x in body.split(b"\n")[:-1]] if body.endswith(b"\n") else []
    if body and not body.endswith(b"\n"):
        lines = [_decode(x) for x in body.split(b"\n")]
    return {
        "reset": False,
        "offset": offset,
        "next_offset": offset + len(body),
        "lines": lines,
        "size": size,
        "more": offset + len(body) < size,
    }
