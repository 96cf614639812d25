"""The traceback frames of one rank, kept cheaply until some evidence needs them.

`LineInterpreter` (restart_agent.lines) collects the frame lines (`File "...", line N`) of
each rank's current traceback, to give the error line that ends it its context and user
frame. Only the first frame and the last MAX_FRAMES are kept, and they are read only for
evidence that is kept (the first per rank and message), so in dense failure output most
frames are never looked at. `Trace` therefore holds them as they came:

- single frames `(line number, text)` (text as `str`, or `bytes` from `File "` on, decoded
  only when read: `frame_text`), from lines interpreted one by one;
- `Span`s: a run of log lines (copied bytes) in which every line holding `File "` is a
  frame line of this rank with the same head (the text before `File "`), as the scanner
  found it with a few C-level searches (`restart_agent.scanner`), without visiting those
  lines.

`frames()` gives exactly the list that appending each frame one by one, keeping the first
and the last MAX_FRAMES, would give. The held items are compacted to that list once they
hold more than twice as many frames, so the memory per rank stays bounded.
"""

from __future__ import annotations

MAX_FRAMES = 16
MAX_TEXT = 500  # characters of a frame's text kept (as for any evidence line)
FRAME = b'File "'


def frame_text(t: str | bytes) -> str:
    """A frame's text as `LineInterpreter.line()` keeps it, from the bytes kept from `File "`
    on (the ASCII head before it decodes on its own, so the rest decodes the same)."""
    return t if isinstance(t, str) else t.decode("utf-8", "replace").rstrip()[:MAX_TEXT]


class Span:
    """Lines `data` (no trailing newline), the first being line `lineno` of the log; every
    line holding `File "` holds it once, right after `head_len` bytes of head."""

    __slots__ = ("lineno", "data", "head_len", "count")

    def __init__(self, lineno: int, data: bytes, head_len: int, count: int) -> None:
        self.lineno = lineno
        self.data = data
        self.head_len = head_len
        self.count = count  # frame lines in it

    def frames(self) -> list[tuple[int, str | bytes]]:
        hl = self.head_len
        n = self.lineno
        return [
            (n + i, line[hl:]) for i, line in enumerate(self.data.split(b"\n")) if FRAME in line
        ]


# a `Span` not made yet: (region, start, end, lineno, head_len, count), its data being
# region[start:end] (copied only when it is made: `span_of`)
PendingSpan = tuple[bytes, int, int, int, int, int]


def span_of(p: PendingSpan) -> Span:
    region, start, end, lineno, head_len, count = p
    return Span(lineno, region[start:end], head_len, count)


class Trace:
    """Frames of one rank's current traceback (see the module docstring)."""

    __slots__ = ("items", "count", "spans")

    def __init__(self) -> None:
        self.items: list[tuple[int, str | bytes] | Span] = []
        self.count = 0  # frames held
        self.spans = False  # some item is a Span

    def add(self, lineno: int, text: str | bytes) -> None:
        self.items.append((lineno, text))
        self.count += 1
        if self.count > MAX_FRAMES + 1:
            if self.spans:
                if self.count > 2 * (MAX_FRAMES + 1):
                    self._compact()
            else:  # the one-by-one rule itself: keep the first and the last MAX_FRAMES
                del self.items[1:2]
                self.count -= 1

    def add_span(self, span: Span) -> None:
        self.items.append(span)
        self.count += span.count
        self.spans = True
        if self.count > 2 * (MAX_FRAMES + 1):
            self._compact()

    def frames(self) -> list[tuple[int, str | bytes]]:
        """The first frame and the last MAX_FRAMES, in log order."""
        if not self.spans:
            return list(self.items)  # type: ignore[arg-type]
        flat: list[tuple[int, str | bytes]] = []
        for item in self.items:
            if isinstance(item, Span):
                flat += item.frames()
            else:
                flat.append(item)
        if len(flat) > MAX_FRAMES + 1:
            flat = flat[:1] + flat[-MAX_FRAMES:]
        return flat

    def _compact(self) -> None:
        self.items = self.frames()  # type: ignore[assignment]
        self.count = len(self.items)
        self.spans = False


def started(lineno: int, text: str | bytes) -> Trace:
    """A trace holding one frame (a traceback header or its first frame)."""
    t = Trace()
    t.items.append((lineno, text))
    t.count = 1
    return t
