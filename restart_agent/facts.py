"""Reader of the launcher's facts: `[relaunch] fact: {json}` lines of a cycle log.

The contract (docs/restart_agent.md, "Launcher facts"): one fact per line, starting the line
with exactly `[relaunch] fact: ` (no rank prefix: worker output is always rank-prefixed in
the cycle log, so a worker cannot forge one), then a compact JSON object with `fact` (the
kind) and `cycle`. Kinds: `cycle_start`, `rank_exit`, `ranks_stopped`, `hang`,
`iterations`, `node_health`, `cycle_end`, `straggler`, `straggler_scores`, `checkpoint`. Unknown kinds and fields are ignored; a malformed
line (bad JSON, wrong types, numbers out of bounds) is ignored, never a crash.

`FactCollector.line(text, lineno)` takes a decoded line; `result()` gives `LauncherFacts`
(None when the log held no fact). Several nodes' facts may share one log: exits, hangs and
iterations are merged, the duration is the longest.

Signed facts (docs/launcher.md, "Facts channel"): the launcher ends each fact's JSON with
`"mac":"<32 hex>"`, HMAC-SHA256 (first 128 bits) of the JSON text before that field (closed
with `}`), keyed with a key only the launcher process holds. Inside `verifying(keys)` (a
context variable, so one thread's analysis does not change another's) a `FactCollector`
trusts only lines whose MAC checks under one of `keys`; the rest are counted in `forged`
and ignored. Outside it (a log analysed without its launcher, `relaunch analyze FILE`)
lines are trusted by their prefix, as before.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from relaunch.restart_agent.model import LauncherFacts, ProcessExit

PREFIX = "[relaunch] fact: "
MAX_FACT_CHARS = 64 * 1024  # a longer line is no fact
MAX_RANK = 10_000_000
MAX_ITERATION = 2**62
MAX_LIST = 100_000  # elements of a rank list kept
MAX_EXITS = 100_000
SIGNALS = {
    1: "SIGHUP",
    2: "SIGINT",
    4: "SIGILL",
    6: "SIGABRT",
    7: "SIGBUS",
    8: "SIGFPE",
    9: "SIGKILL",
    11: "SIGSEGV",
    13: "SIGPIPE",
    15: "SIGTERM",
}


MAC_CHARS = 32
_MAC_TAIL = re.compile(r',"mac":"([0-9a-f]{32})"\}$')
_KEYS: ContextVar[tuple[bytes, ...] | None] = ContextVar("relaunch_fact_keys", default=None)


def mac(key: bytes, body: str) -> str:
    """The MAC of one fact's JSON text `body` (without the mac field)."""
    return hmac.new(key, body.encode("utf-8"), hashlib.sha256).hexdigest()[:MAC_CHARS]


def sign(key: bytes, body: str) -> str:
    """`body` (a compact JSON object) with its `"mac"` field appended."""
    if not body.endswith("}"):
        raise ValueError("a fact is a JSON object")
    sep = "," if body != "{}" else ""
    return f'{body[:-1]}{sep}"mac":"{mac(key, body)}"}}'


def verified(body: str, keys: Iterable[bytes]) -> bool:
    """True when the JSON text `body` ends with a `"mac"` that checks under one of `keys`."""
    m = _MAC_TAIL.search(body)
    if m is None:
        return False
    signed = body[: m.start()] + "}"
    got = m.group(1)
    return any(hmac.compare_digest(mac(k, signed), got) for k in keys)


@contextmanager
def verifying(keys: Iterable[bytes]) -> Iterator[None]:
    """Within this block (this thread / task), only fact lines signed with `keys` count."""
    token = _KEYS.set(tuple(keys))
    try:
        yield
    finally:
        _KEYS.reset(token)


def trusted_keys() -> tuple[bytes, ...] | None:
    """The keys facts must be signed with here, or None (facts trusted by prefix)."""
    return _KEYS.get()


def signal_name(exitcode: int | None) -> str | None:
    """The signal a negative exit code says (-9 -> SIGKILL), else None."""
    if exitcode is None or exitcode >= 0:
        return None
    return SIGNALS.get(-exitcode, f"SIG{-exitcode}")


def _int(v: Any, lo: int = 0, hi: int = MAX_RANK) -> int | None:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        return None
    return v


def _float(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) and 0 <= f < 1e10 else None


def _str(v: Any, limit: int = 200) -> str | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (str, int)):
        s = str(v)[:limit]
        return s or None
    return None


def _ranks(v: Any) -> list[int]:
    if not isinstance(v, list):
        return []
    out = {r for r in (_int(x) for x in v[:MAX_LIST]) if r is not None}
    return sorted(out)


def parse_fact(text: str, keys: tuple[bytes, ...] | None = None) -> dict[str, Any] | None:
    """The JSON object of a fact line, or None when `text` is not a well-formed fact (or,
    with `keys`, not signed with one of them)."""
    if not text.startswith(PREFIX) or len(text) > MAX_FACT_CHARS:
        return None
    if keys is not None and not verified(text[len(PREFIX) :], keys):
        return None
    try:
        obj = json.loads(text[len(PREFIX) :])
    except (ValueError, RecursionError):  # bad JSON, huge ints, deep nesting
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("fact"), str):
        return None
    return obj


class FactCollector:
    """Collects the fact lines of one cycle log, in log order."""

    def __init__(self) -> None:
        self.count = 0
        self.keys = trusted_keys()  # None: trust by prefix; else only these signatures
        self.forged = 0  # lines with the fact prefix whose signature did not check
        self.cycle: int | None = None
        self.world_size: int | None = None
        self.exits: list[ProcessExit] = []
        self.stopped: set[int] = set()
        self.hangs: list[dict[str, Any]] = []
        self.iterations: dict[int, int] = {}
        self.silent: set[int] = set()
        self.client: bool | None = None
        self.health: list[dict[str, Any]] = []
        self.outcome: str | None = None
        self.duration: float | None = None
        self.stragglers: dict[tuple[str | None, int], dict[str, Any]] = {}
        self.straggler_scores: list[dict[str, Any]] = []
        self.checkpoint: dict[str, Any] | None = None

    def line(self, text: str, lineno: int) -> bool:
        """Take one decoded line (no newline); True when it was a well-formed fact."""
        obj = parse_fact(text, self.keys)
        if obj is None:
            if self.keys is not None and text.startswith(PREFIX):
                self.forged += 1
            return False
        handler = getattr(self, "_" + obj["fact"], None)
        if handler is None or obj["fact"].startswith("_"):
            return False
        if not handler(obj, lineno):
            return False
        self.count += 1
        cycle = _int(obj.get("cycle"), 0, 2**31)
        if cycle is not None and self.cycle is None:
            self.cycle = cycle
        return True

    # ------------------------------------------------------------------ kinds
    def _cycle_start(self, o: dict[str, Any], lineno: int) -> bool:
        ws = _int(o.get("world_size"), 1)
        if ws is not None:
            self.world_size = max(ws, self.world_size or 0)
        return True

    def _rank_exit(self, o: dict[str, Any], lineno: int) -> bool:
        rank = _int(o.get("rank"))
        exitcode = _int(o.get("exitcode"), -255, 255)
        if rank is None or len(self.exits) >= MAX_EXITS:
            return False
        sig = _str(o.get("signal"), 16) or signal_name(exitcode)
        self.exits.append(
            ProcessExit(
                source="launcher",
                line=lineno,
                rank=rank,
                local_rank=_int(o.get("local_rank")),
                exitcode=exitcode,
                signal=sig,
                node=_str(o.get("node")),
                first=o.get("first") is True,
                t_s=_float(o.get("t_s")),
            )
        )
        return True

    def _ranks_stopped(self, o: dict[str, Any], lineno: int) -> bool:
        self.stopped.update(_ranks(o.get("ranks")))
        return True

    def _hang(self, o: dict[str, Any], lineno: int) -> bool:
        rank = _int(o.get("rank"))
        if rank is None or len(self.hangs) >= 1000:
            return False
        self.hangs.append(
            {
                "rank": rank,
                "silent_s": _float(o.get("silent_s")),
                "section": _str(o.get("section")),
                "initial": o.get("initial") is True,
                "others": _ranks(o.get("others")),
                "line": lineno,
            }
        )
        return True

    def _iterations(self, o: dict[str, Any], lineno: int) -> bool:
        last = o.get("last")
        if isinstance(last, dict):
            for k, v in list(last.items())[:MAX_LIST]:
                ok = isinstance(k, str) and k.isascii() and k.isdigit() and len(k) <= 8
                rank = _int(int(k)) if ok else None
                it = _int(v, 0, MAX_ITERATION)
                if rank is not None and it is not None:
                    self.iterations[rank] = max(it, self.iterations.get(rank, 0))
        self.silent.update(_ranks(o.get("silent")))
        client = o.get("client")
        if isinstance(client, bool):
            self.client = bool(self.client) or client
        return True

    def _node_health(self, o: dict[str, Any], lineno: int) -> bool:
        node = _str(o.get("node"))
        healthy = o.get("healthy")
        if node is None or not isinstance(healthy, bool):
            return False
        self.health.append(
            {"node": node, "healthy": healthy, "reason": _str(o.get("reason"), 500) or ""}
        )
        return True

    def _cycle_end(self, o: dict[str, Any], lineno: int) -> bool:
        outcome = o.get("outcome")
        if outcome in ("failed", "succeeded", "stopped"):
            self.outcome = outcome
        d = _float(o.get("duration_s"))
        if d is not None:
            self.duration = max(d, self.duration or 0.0)
        return True

    def _straggler(self, o: dict[str, Any], lineno: int) -> bool:
        rank = _int(o.get("rank"))
        reports = _int(o.get("reports"), 1, 2**31)
        rel, thr = _float(o.get("relative")), _float(o.get("threshold"))
        if rank is None or reports is None or rel is None or thr is None:
            return False
        node = _str(o.get("node"))
        key = (node, rank)
        prev = self.stragglers.get(key)
        if prev is None and len(self.stragglers) >= 1000:
            return False
        if prev is None or reports >= prev["reports"]:
            self.stragglers[key] = {
                "rank": rank,
                "node": node,
                "section": _str(o.get("section")),
                "relative": rel,
                "individual": _float(o.get("individual")),
                "threshold": thr,
                "reports": reports,
                "report": _int(o.get("report"), 1, 2**31),
                "line": lineno,
                "since_line": prev["since_line"] if prev is not None else lineno,
            }
        return True

    def _straggler_scores(self, o: dict[str, Any], lineno: int) -> bool:
        ranks = o.get("ranks")
        thr = _float(o.get("threshold"))
        if not isinstance(ranks, dict) or thr is None or len(self.straggler_scores) >= 1000:
            return False
        clean: dict[str, dict[str, Any]] = {}
        for k, v in list(ranks.items())[:MAX_LIST]:
            ok = isinstance(k, str) and k.isascii() and k.isdigit() and len(k) <= 8
            if not ok or not isinstance(v, dict) or _float(v.get("relative")) is None:
                continue
            clean[str(int(k))] = {
                "relative": _float(v.get("relative")),
                "lowest": _float(v.get("lowest")),
                "individual": _float(v.get("individual")),
                "section": _str(v.get("section")),
                "below": _int(v.get("below"), 0, 2**31) or 0,
            }
        self.straggler_scores.append(
            {
                "node": _str(o.get("node")),
                "threshold": thr,
                "reports": _int(o.get("reports"), 0, 2**31) or 0,
                "ranks": clean,
            }
        )
        return True

    def _checkpoint(self, o: dict[str, Any], lineno: int) -> bool:
        """A complete checkpoint (relaunch.checkpoint): the newest step is kept; for the
        same step the later report (the persistent tier after the local one)."""
        step = _int(o.get("step"), 0, MAX_ITERATION)
        if step is None:
            return False
        prev = self.checkpoint
        if prev is not None and step < prev["step"]:
            return True
        self.checkpoint = {
            "step": step,
            "tier": _str(o.get("tier"), 32),
            "size": _int(o.get("size"), 0, 2**62),
            "path": _str(o.get("path"), 1024),
            "at": _float(o.get("at")),
            "duration_s": _float(o.get("duration_s")),
            "rank": _int(o.get("rank")),
            "line": lineno,
        }
        return True

    # ------------------------------------------------------------------ result
    def result(self) -> LauncherFacts | None:
        if not self.count:
            return None
        firsts = [e for e in self.exits if e.first and e.exitcode != 0]
        firsts.sort(key=lambda e: (e.t_s if e.t_s is not None else math.inf, e.line))
        silent = self.silent - set(self.iterations)
        return LauncherFacts(
            facts=self.count,
            cycle=self.cycle,
            world_size=self.world_size,
            exits=list(self.exits),
            first_failing_rank=firsts[0].rank if firsts else None,
            stopped_ranks=sorted(self.stopped),
            hangs=list(self.hangs),
            iterations=dict(sorted(self.iterations.items())),
            silent_ranks=sorted(silent),
            client=self.client,
            node_health=list(self.health),
            outcome=self.outcome,
            duration_s=self.duration,
            stragglers=sorted(self.stragglers.values(), key=lambda d: (d["line"], d["rank"])),
            straggler_scores=list(self.straggler_scores),
            checkpoint=dict(self.checkpoint) if self.checkpoint is not None else None,
        )
