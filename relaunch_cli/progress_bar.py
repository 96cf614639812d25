"""A one-line progress bar on stderr, for reading large files, only when stderr is a terminal.

`ProgressBar.for_stream(total, stream)` returns a bar when `stream` is a TTY and `total`
(bytes) is at least `MIN_BYTES`, else a bar that prints nothing; `update(done)` redraws at
most once per percent, `close()` erases the line. Output that is redirected or piped never
gets a carriage return or an escape sequence.
"""

from __future__ import annotations

import sys
from typing import TextIO

MIN_BYTES = 16 << 20
WIDTH = 30


class ProgressBar:
    def __init__(self, total: int, stream: TextIO | None, label: str) -> None:
        self.total = max(1, int(total))
        self.stream = stream
        self.label = label
        self._shown = -1

    @classmethod
    def for_stream(
        cls, total: int | None, stream: TextIO | None = None, label: str = ""
    ) -> ProgressBar:
        stream = sys.stderr if stream is None else stream
        try:
            tty = stream.isatty()
        except (AttributeError, ValueError, OSError):
            tty = False
        active = tty and total is not None and total >= MIN_BYTES
        return cls(total or 1, stream if active else None, label)

    @property
    def active(self) -> bool:
        return self.stream is not None

    def update(self, done: int) -> None:
        if self.stream is None:
            return
        pct = min(100, done * 100 // self.total)
        if pct == self._shown:
            return
        self._shown = pct
        filled = WIDTH * pct // 100
        bar = "#" * filled + "." * (WIDTH - filled)
        mib = f"{done / (1 << 20):.0f}/{self.total / (1 << 20):.0f} MiB"
        self.stream.write(f"\r{self.label}[{bar}] {pct:3d}% {mib}")
        self.stream.flush()

    def close(self) -> None:
        if self.stream is None or self._shown < 0:
            return
        self.stream.write("\r\x1b[K")
        self.stream.flush()
        self._shown = -1
