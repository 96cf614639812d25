"""Reading a cycle log by line number, streaming: evidence windows and cited lines.

Line numbers are 1-based and count `\n`-terminated lines, the last line counting even
without a final newline (the scanner's convention). The file is read sequentially in
1 MiB chunks: lines before the wanted ones are skipped by counting newlines (in C, no
per-line Python work), so a window or a set of cited lines costs one pass and O(window)
memory whatever the file's size. A line is kept up to `MAX_LINE_BYTES`; the rest of a
pathological multi-gigabyte line is skipped, not loaded. Bytes are decoded as UTF-8 with
replacement, so binary or truncated logs never raise.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import BinaryIO

MAX_LINE_BYTES = 4096  # bytes kept per line; the rest of a longer line is skipped
_CHUNK = 1 << 20


def _decode(raw: bytes) -> str:
    return raw.rstrip(b"\r\n").decode("utf-8", errors="replace").replace("\x00", "")


def _skip_to(f: BinaryIO, current: int, target: int) -> int:
    """From the start of line `current`, move `f` to the start of line `target` (> current).

    Returns the line number now at `f`'s position (less than `target` at end of file).
    """
    while current < target:
        pos = f.tell()
        chunk = f.read(_CHUNK)
        if not chunk:
            return current
        n = chunk.count(b"\n")
        if current + n < target:
            current += n
            continue
        idx = -1
        for _ in range(target - current):
            idx = chunk.index(b"\n", idx + 1)
        f.seek(pos + idx + 1)
        return target
    return current


def _read_line(f: BinaryIO, max_line_bytes: int) -> bytes | None:
    """The next line (cut to `max_line_bytes`), its tail skipped; None at end of file."""
    head = f.readline(max_line_bytes)
    if not head:
        return None
    if not head.endswith(b"\n"):
        while True:
            rest = f.readline(_CHUNK)
            if not rest or rest.endswith(b"\n"):
                break
    return head


def iter_lines(
    path: str | os.PathLike[str], first: int = 1, max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, str]]:
    """Yield (line_number, text) from line `first` on, text cut to `max_line_bytes` bytes."""
    with open(path, "rb") as f:
        number = _skip_to(f, 1, max(1, first))
        if number < first:
            return
        while (raw := _read_line(f, max_line_bytes)) is not None:
            yield number, _decode(raw)
            number += 1


def count_lines(path: str | os.PathLike[str]) -> int:
    total, last = 0, b""
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            total += chunk.count(b"\n")
            last = chunk
    return total + (1 if last and not last.endswith(b"\n") else 0)


def window(
    path: str | os.PathLike[str], center: int | None, before: int, after: int
) -> tuple[list[tuple[int, str]], int | None]:
    """Lines [center-before, center+after] (or the last `before+after+1` lines if `center` is None).

    Returns (lines, total) where `total` is the file's line count when it was counted (tail
    windows), else None.
    """
    if center is None:
        total = count_lines(path)
        lo = max(1, total - (before + after))
        return list(iter_lines(path, lo)), total
    lo, hi = max(1, center - before), center + after
    out: list[tuple[int, str]] = []
    for number, text in iter_lines(path, lo):
        if number > hi:
            break
        out.append((number, text))
    return out, None


def read_lines(path: str | os.PathLike[str], numbers: Iterable[int]) -> dict[int, str]:
    """The text of each wanted line that exists; missing numbers are simply absent."""
    wanted = sorted(
        {n for n in numbers if isinstance(n, int) and not isinstance(n, bool) and n >= 1}
    )
    found: dict[int, str] = {}
    if not wanted:
        return found
    with open(path, "rb") as f:
        current = 1
        for n in wanted:
            current = _skip_to(f, current, n)
            if current < n:
                break  # past the end of the file
            raw = _read_line(f, MAX_LINE_BYTES)
            if raw is None:
                break
            found[n] = _decode(raw)
            current = n + 1
    return found
