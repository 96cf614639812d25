"""The launchers' fact keys a service was handed, per cycle, and the context that uses them.

A launcher signs its fact lines with a key only it holds (`launcher.facts`: one key per
cycle, derived from 32 random bytes in its memory). When its analysis runs elsewhere
(`relaunch serve`), the launcher hands over that cycle's key in its own authenticated
request at the cycle's end, after its workers are gone (`POST /logs` with
`analysis_intent: terminal`, or a node's `.../nodes/{node}/end`, field `fact_key`). The
engine then analyses the cycle under `restart_agent.facts.verifying(keys)`, the same check
the embedded engine makes: fact lines whose MAC does not verify are counted as forged and
ignored. A cycle no launcher handed a key for is analysed as before (facts trusted by
prefix).

Keys live in memory only (never stored, never answered to a client), at most
`MAX_CYCLES` cycles (the oldest forgotten first). One key per (job, cycle, node): a second,
different key for the same node is refused (`KeyConflict`), so whoever hands over a key
first for a node decides which key its facts must carry.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from contextlib import AbstractContextManager, nullcontext

from relaunch.restart_agent.facts import verifying

MAX_CYCLES = 100_000
KEY_HEX = re.compile(r"^[0-9a-f]{64}$")


class KeyConflict(ValueError):
    """A node of a cycle already handed over a different fact key."""


def parse_key(text: str) -> bytes:
    """A fact key as sent over HTTP: 64 lowercase hex characters (ValueError otherwise)."""
    if not isinstance(text, str) or not KEY_HEX.match(text):
        raise ValueError("fact_key must be 64 lowercase hex characters")
    return bytes.fromhex(text)


class FactKeys:
    """(job, cycle) -> {node: key}, bounded, thread-safe."""

    def __init__(self, max_cycles: int = MAX_CYCLES) -> None:
        self.max_cycles = max_cycles
        self._keys: OrderedDict[tuple[str, int], dict[str, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, job_id: str, cycle: int, node: str | None, key: bytes) -> None:
        """Keep `node`'s key for the cycle; KeyConflict when it gave a different one."""
        with self._lock:
            nodes = self._keys.setdefault((job_id, cycle), {})
            self._keys.move_to_end((job_id, cycle))
            name = node or ""
            known = nodes.get(name)
            if known is not None and known != key:
                raise KeyConflict(
                    f"job {job_id} cycle {cycle}"
                    + (f" node {name}" if name else "")
                    + ": a different fact key was already handed over"
                )
            nodes[name] = key
            while len(self._keys) > self.max_cycles:
                self._keys.popitem(last=False)

    def keys(self, job_id: str | None, cycle: int | None) -> tuple[bytes, ...] | None:
        """The keys the cycle's facts must be signed with, None when none was handed over."""
        if job_id is None or cycle is None:
            return None
        with self._lock:
            nodes = self._keys.get((job_id, cycle))
            return tuple(nodes.values()) if nodes else None

    def context(self, job_id: str | None, cycle: int | None) -> AbstractContextManager[None]:
        """Where the cycle is analysed: only signed facts count when it has keys."""
        keys = self.keys(job_id, cycle)
        return nullcontext() if keys is None else verifying(keys)
