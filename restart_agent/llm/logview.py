"""Reading a cycle log by line number, streaming: evidence windows and cited lines.

Line numbers are 1-based and count `\n`-terminated lines, the last line counting even
without a final newline (the scanner's convention). The file is read sequentially in
bounded chunks: a window or a set of cited lines costs one pass and O(window) memory,
whatever the file's size, and a pathological multi-gigabyte line is cut, not loaded.
Bytes are decoded as UTF-8 with replacement, so binary or truncated logs never raise.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Iterator

MAX_LINE_BYTES = 4096  # bytes kept per line; the rest of a longer line is skipped
_CHUNK = 1 << 16


def iter_lines(
    path: str | os.PathLike[str], max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, str]]:
    """Yield (line_number, text) for every line, text cut to `max_line_bytes` bytes."""
    with open(path, "rb") as f:
        number = 0
        while True:
            head = f.readline(max_line_bytes)
            if not head:
                return
            if not head.endswith(b"\n"):
                # a line longer than the limit: skip to its end without keeping it
                while True:
                    rest = f.readline(_CHUNK)
                    if not rest or rest.endswith(b"\n"):
                        break
            number += 1
            yield number, _decode(head)


def _decode(raw: bytes) -> str:
    return raw.rstrip(b"\r\n").decode("utf-8", errors="replace").replace("\x00", "")


def window(
    path: str | os.PathLike[str], center: int | None, before: int, after: int
) -> tuple[list[tuple[int, str]], int | None]:
    """Lines [center-before, center+after] (or the last `before+after+1` lines if `center` is None).

    Returns (lines, total) where `total` is the file's line count when the pass reached
    the end, or None when it stopped early after the window.
    """
    if center is None:
        tail: deque[tuple[int, str]] = deque(maxlen=before + after + 1)
        total = 0
        for number, text in iter_lines(path):
            tail.append((number, text))
            total = number
        return list(tail), total
    lo, hi = max(1, center - before), center + after
    out: list[tuple[int, str]] = []
    for number, text in iter_lines(path):
        if number > hi:
            return out, None
        if number >= lo:
            out.append((number, text))
    return out, (out[-1][0] if out else None)


def read_lines(path: str | os.PathLike[str], numbers: Iterable[int]) -> dict[int, str]:
    """The text of each wanted line that exists; missing numbers are simply absent."""
    wanted = {n for n in numbers if isinstance(n, int) and n >= 1}
    found: dict[int, str] = {}
    if not wanted:
        return found
    last = max(wanted)
    for number, text in iter_lines(path):
        if number in wanted:
            found[number] = text
        if number >= last:
            break
    return found
