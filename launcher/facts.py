"""Launcher facts: the machine-readable lines the launcher writes into each cycle log.

One fact per line, `[relaunch] fact: {compact JSON}` (the cycle log adds the `[relaunch] `
prefix), per the contract in docs/launcher.md ("Launcher facts"): the restart agent reads
them as its highest-trust evidence (which rank failed first, hangs, progress per rank,
cycle duration). Every fact has `fact` (its kind) and `cycle`; this module only formats,
the agent decides what is true.

Workers cannot forge a fact: every line ends with `"mac"`, an HMAC-SHA256 (128 bits) of the
line's JSON before that field, keyed with `cycle_key(cycle)`, derived from `key()`, 32 random
bytes made in this process and kept only in its memory (never in the environment, a file or
a worker's arguments). The analysis of the launcher's own logs (`attribution_client`,
embedded) runs under `restart_agent.facts.verifying([cycle_key(cycle)])` and trusts only
lines whose MAC checks; a line a worker appends to the log file, or smuggles in through a
value it reports, has no valid MAC. With `relaunch serve` the launcher hands the cycle's
key to the service at the cycle's end, after its workers are gone
(`attribution.core.fact_keys`); a key of one cycle signs nothing of another.
Workers started with `--start-method fork` share the launcher's memory (the default, spawn,
does not): docs/launcher.md, "Facts channel".
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import secrets
import signal
import time
from collections.abc import Iterable, Mapping
from typing import Any

from relaunch.restart_agent.facts import sign

FACT_PREFIX = "fact: "  # after the cycle log's "[relaunch] "
CYCLE_END_OUTCOMES = ("failed", "succeeded", "stopped")
_KEY = secrets.token_bytes(32)  # this launcher process's fact key (memory only)


def key() -> bytes:
    """The key this launcher signs its fact lines with (never handed to a worker)."""
    return _KEY


def cycle_key(cycle: int) -> bytes:
    """The key of `cycle`'s fact lines: HMAC-SHA256 of the cycle number under `key()` (handed
    to the attribution service at the cycle's end; says nothing about another cycle's)."""
    return hmac.new(_KEY, b"cycle\0%d" % int(cycle), hashlib.sha256).digest()


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: a non-finite float becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def fact(kind: str, cycle: int, **fields: Any) -> str:
    """The text of one fact line (without the `[relaunch] ` prefix)."""
    body = {"fact": kind, "cycle": int(cycle)}
    body.update({k: _clean(v) for k, v in fields.items()})
    text = json.dumps(body, separators=(",", ":"), allow_nan=False, default=str)
    return FACT_PREFIX + sign(cycle_key(cycle), text)


def signal_name(exitcode: int) -> str | None:
    """`SIGKILL` for exit code -9; None for a normal exit code."""
    if exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"SIG{-exitcode}"


def cycle_start(
    cycle: int, job: str, node: int | str | None, ranks: Iterable[int], world_size: int, t: float
) -> str:
    return fact(
        "cycle_start",
        cycle,
        job=job,
        node=node,
        ranks=sorted(int(r) for r in ranks),
        world_size=int(world_size),
        t=round(float(t), 3),
    )


def rank_exit(
    cycle: int,
    rank: int,
    local_rank: int,
    node: int | str | None,
    exitcode: int,
    first: bool,
    t_s: float,
) -> str:
    return fact(
        "rank_exit",
        cycle,
        rank=int(rank),
        local_rank=int(local_rank),
        node=node,
        exitcode=int(exitcode),
        signal=signal_name(int(exitcode)),
        first=bool(first),
        t_s=round(float(t_s), 3),
    )


def ranks_stopped(cycle: int, ranks: Iterable[int]) -> str:
    return fact("ranks_stopped", cycle, ranks=sorted(int(r) for r in ranks))


def hang(
    cycle: int,
    rank: int,
    silent_s: float,
    section: str | None,
    initial: bool,
    others: Iterable[int],
) -> str:
    return fact(
        "hang",
        cycle,
        rank=int(rank),
        silent_s=round(float(silent_s), 3),
        section=section,
        initial=bool(initial),
        others=[int(r) for r in others],
    )


def iterations(cycle: int, last: Mapping[int, int], ranks: Iterable[int], client: bool) -> str:
    """`last`: the last iteration each rank reported; `ranks`: the ranks of this node."""
    reported = {int(r): int(i) for r, i in last.items()}
    return fact(
        "iterations",
        cycle,
        last={str(r): reported[r] for r in sorted(reported)},
        silent=sorted(int(r) for r in ranks if int(r) not in reported),
        client=bool(client),
    )


def checkpoint(
    cycle: int,
    rank: int,
    step: int,
    path: str,
    tier: str,
    size: int,
    duration_s: float,
    at: float | None = None,
) -> str:
    """A checkpoint that became complete (relaunch.checkpoint's report); `at`: when the
    launcher received the report (Unix seconds; the history's "when" of the checkpoint)."""
    return fact(
        "checkpoint",
        cycle,
        rank=int(rank),
        step=int(step),
        path=str(path),
        tier=str(tier),
        size=int(size),
        duration_s=round(float(duration_s), 3),
        at=round(float(time.time() if at is None else at), 3),
    )


def node_health(cycle: int, node: str, healthy: bool, reason: str) -> str:
    return fact("node_health", cycle, node=str(node), healthy=bool(healthy), reason=str(reason))


def cycle_end(cycle: int, outcome: str, duration_s: float) -> str:
    """`outcome`: failed | succeeded | stopped (an interrupted cycle was stopped)."""
    if outcome not in CYCLE_END_OUTCOMES:
        outcome = "stopped"
    return fact("cycle_end", cycle, outcome=outcome, duration_s=round(float(duration_s), 3))
