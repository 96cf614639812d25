"""The worker-to-launcher datagram: one message type for its sender and its receiver.

`relaunch.client` (the worker side, `launcher/client.py`) builds a `HeartbeatMessage` and
sends `encode()`; the launcher's `HeartbeatServer` (`launcher/heartbeat.py`) reads each
datagram with `HeartbeatMessage.from_wire` (or `decode`). On the wire it is one JSON
object with short keys: `r` rank, `c` cycle, `k` kind (`hello`, `hb`, `sec_start`,
`sec_end`, `progress`, `strag`), `t` the sender's monotonic time, `o` the innermost open
section (null: none; absent: an older client that does not say), then the kind's own keys
(`s` section; `i` iteration, `ckpt` checkpoint path and, for a completed checkpoint, `cs`
step, `ct` tier, `cb` bytes, `cd` seconds; `n` report number, `sec` section timings and
`tm` timer of a straggler summary). Every field read is typed and bounded here
(`clean_message`); a datagram that is not JSON or not a message reads as None.

Stdlib only: the worker imports it with `relaunch.client`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NOT_SAID = object()  # a message without "o" (an older client): its section is unknown
KINDS = frozenset({"hello", "hb", "sec_start", "sec_end", "progress", "strag"})
MAX_RANK = 10_000_000
MAX_ITERATION = 2**62
MAX_NAME_CHARS = 200  # a section name
MAX_PATH_CHARS = 1024  # a checkpoint path
# characters that end or hide a line (str.splitlines breaks on all of these) and controls
_UNSAFE = {
    cp: f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}"
    for cp in (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029, 0x200E, 0x200F,
               *range(0x202A, 0x202F), *range(0x2066, 0x206A))
}  # fmt: skip


def clean_text(value: Any, limit: int) -> str | None:
    """A worker-reported string as one safe line: controls and line separators escaped,
    at most `limit` characters; None for a non-string or an empty one."""
    if not isinstance(value, str) or not value:
        return None
    out = value[:limit].translate(_UNSAFE)[: limit * 2]
    return out.encode("utf-8", "backslashreplace").decode("utf-8")


def _seconds(value: Any) -> float:
    """A worker-reported duration: 0 to 1e9 seconds, else 0.0 (compared before it is
    converted: a huge JSON integer overflows float(); NaN fails the comparison)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1e9:
        return 0.0
    return float(value)


def _int(value: Any, lo: int, hi: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        return None
    return value


def clean_message(msg: Any) -> dict[str, Any] | None:
    """The typed, bounded form of one worker datagram, or None when it is not one.

    Keeps `r` (rank), `c` (cycle), `k` (kind), `t` (float), `o` (open section or None),
    `s` (section), `i` (iteration), `ckpt` (checkpoint path) with, for a completed
    checkpoint, `cs` (step), `ct` (tier), `cb` (bytes), `cd` (seconds) and, for straggler
    summaries, `n` and `sec` (validated by `launcher.straggler.scores`)."""
    if not isinstance(msg, dict):
        return None
    rank = _int(msg.get("r"), 0, MAX_RANK)
    cycle = _int(msg.get("c", -1), -1, 2**31)
    kind = msg.get("k")
    if rank is None or cycle is None or kind not in KINDS:
        return None
    out: dict[str, Any] = {"r": rank, "c": cycle, "k": kind}
    t = msg.get("t")
    if isinstance(t, float):
        out["t"] = t
    o = msg.get("o", NOT_SAID)
    if o is None or isinstance(o, str):  # anything else: the open section is not said
        out["o"] = None if o is None else clean_text(o, MAX_NAME_CHARS)
    s = clean_text(msg.get("s"), MAX_NAME_CHARS)
    if s is not None:
        out["s"] = s
    if kind == "progress":
        i = _int(msg.get("i"), 0, MAX_ITERATION)
        if i is not None:
            out["i"] = i
        ckpt = clean_text(msg.get("ckpt"), MAX_PATH_CHARS)
        if ckpt is not None:
            out["ckpt"] = ckpt
            # a completed checkpoint (client.report_checkpoint): step, tier, bytes, seconds
            step = _int(msg.get("cs"), 0, MAX_ITERATION)
            if step is not None:
                out["cs"] = step
                out["ct"] = clean_text(msg.get("ct"), MAX_NAME_CHARS) or ""
                out["cb"] = _int(msg.get("cb"), 0, 2**62) or 0
                out["cd"] = _seconds(msg.get("cd"))
    elif kind == "strag":
        n = _int(msg.get("n"), 0, 2**31)
        if n is not None:
            out["n"] = n
        if "sec" in msg:
            out["sec"] = msg["sec"]
    return out


@dataclass(frozen=True)
class HeartbeatMessage:
    """One datagram from a worker (see the module docstring for the wire keys)."""

    rank: int
    cycle: int
    kind: str
    sent_at: float | None = None  # `t`: the sender's time.monotonic()
    open_section: str | None = None  # `o`: the innermost section the sender is in
    open_said: bool = False  # the datagram had `o` (older clients leave it out)
    # the kind's own keys, as on the wire (`s`, `i`, `ckpt`, `cs`, `ct`, `cb`, `cd`, `n`, ...)
    fields: Mapping[str, Any] = field(default_factory=dict)

    @property
    def section(self) -> str | None:
        """The section a `sec_start` / `sec_end` names."""
        s = self.fields.get("s")
        return s if isinstance(s, str) else None

    @property
    def iteration(self) -> int | None:
        """The iteration a `progress` message reports."""
        i = self.fields.get("i")
        return i if isinstance(i, int) else None

    @property
    def checkpoint(self) -> str | None:
        """The checkpoint path a `progress` message reports."""
        c = self.fields.get("ckpt")
        return c if isinstance(c, str) else None

    def to_wire(self) -> dict[str, Any]:
        """The JSON object: `r`, `c`, `k`, then `t` and `o` when known, then the fields."""
        out: dict[str, Any] = {"r": self.rank, "c": self.cycle, "k": self.kind}
        if self.sent_at is not None:
            out["t"] = self.sent_at
        if self.open_said:
            out["o"] = self.open_section
        out.update(self.fields)
        return out

    def encode(self) -> bytes:
        """The datagram's bytes."""
        return json.dumps(self.to_wire()).encode()

    @classmethod
    def from_wire(cls, raw: Any) -> HeartbeatMessage | None:
        """The typed, bounded message of one parsed datagram, or None when it is not one."""
        msg = clean_message(raw)
        if msg is None:
            return None
        said = "o" in msg
        return cls(
            rank=msg.pop("r"),
            cycle=msg.pop("c"),
            kind=msg.pop("k"),
            sent_at=msg.pop("t", None),
            open_section=msg.pop("o", None),
            open_said=said,
            fields=msg,
        )

    @classmethod
    def decode(cls, data: bytes) -> HeartbeatMessage | None:
        """`from_wire` of a datagram's bytes; None for bytes that are not a JSON message."""
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError):
            return None
        return cls.from_wire(raw)
