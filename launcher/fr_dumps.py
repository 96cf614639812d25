"""Flight Recorder dumps of a cycle, taken by the launcher with no hand step.

Per cycle the launcher enables the Flight Recorder for its workers (`cycle_env`): the ring
buffer size (`TORCH_FR_BUFFER_SIZE`, 2000) and torch's own dump location
(`TORCH_FR_DUMP_TEMP_FILE` = `<job dir>/fr/cycle_<N>/rank_`, where NCCL's dump-on-timeout
writes), plus `RELAUNCH_FR_DIR` for the worker-side handler (`launcher.fr_worker`, started
when the script imports `relaunch.client`). Settings the user gave win: they are read from
the launcher's environment when it started, never from what an earlier cycle set.

Before it stops workers on a heartbeat-declared hang the launcher asks for dumps
(`request`): a request file in the cycle's dump folder, which each worker's handler
answers with `rank_<R>` (its `_dump_fr_trace()`, written atomically), waited for a bounded
time. On several nodes the request goes through the round's store (`ask_nodes`): every
node's launcher sees it at its next monitor tick (`requested`), has its own workers dump
and says so (`mark_done`); the asking node waits for all of them (`wait_nodes`) before it
stops anything, so no dump is taken after a peer's workers were stopped (gloo then reports
the failed op as completed).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

ENV_DIR = "RELAUNCH_FR_DIR"
REQUEST = "request"
BUFFER_DEFAULT = "2000"
WAIT_S = 15.0  # longest the launcher waits for its workers' dumps
NODES_WAIT_S = 20.0  # longest the asking node waits for the other nodes' dumps
_KEY = "relaunch/fr/request"
_DONE = "relaunch/fr/done"
_BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
_FILE_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")


def cycle_dir(job_dir: str | Path, cycle: int) -> Path:
    return Path(job_dir) / "fr" / f"cycle_{cycle}"


def cycle_env(
    env: MutableMapping[str, str], user: Mapping[str, str], job_dir: str | Path, cycle: int
) -> Path:
    """Set the Flight Recorder variables of cycle `cycle` in `env` (the workers'
    environment); `user`: the environment the launcher started with (its values win)."""
    where = cycle_dir(job_dir, cycle)
    where.mkdir(parents=True, exist_ok=True)
    env[ENV_DIR] = str(where)
    if not any(v in user for v in _BUFFER_VARS):
        env["TORCH_FR_BUFFER_SIZE"] = BUFFER_DEFAULT
    if not any(v in user for v in _FILE_VARS):
        env["TORCH_FR_DUMP_TEMP_FILE"] = str(where / "rank_")
    if "TORCH_NCCL_DUMP_ON_TIMEOUT" not in user:
        env["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "1"
    return where


def dumped(where: Path, ranks: Iterable[int]) -> list[int]:
    return sorted(r for r in ranks if (where / f"rank_{r}").is_file())


def request(where: Path, ranks: Iterable[int], wait_s: float = WAIT_S) -> list[int]:
    """Ask this node's workers for their dumps; wait until `ranks` answered or `wait_s`
    passed. Returns the ranks whose dump is there."""
    want = sorted(set(ranks))
    try:
        (where / REQUEST).touch()
    except OSError:
        return []
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        got = dumped(where, want)
        if got == want:
            return got
        time.sleep(0.05)
    return dumped(where, want)


def ask_nodes(store: Any, reason: str) -> None:
    store.set(_KEY, reason)


def requested(store: Any) -> bool:
    try:
        return bool(store.check([_KEY]))
    except Exception:  # noqa: BLE001 - the store went away: nobody asks any more
        return False


def mark_done(store: Any, group_rank: int, count: int) -> None:
    store.set(f"{_DONE}/{group_rank}", str(count))


def wait_nodes(store: Any, world: int, wait_s: float = NODES_WAIT_S) -> list[int]:
    """Group ranks that answered the request within `wait_s`."""
    deadline = time.monotonic() + wait_s
    keys = {g: f"{_DONE}/{g}" for g in range(world)}
    done: set[int] = set()
    while True:
        for g, k in keys.items():
            if g not in done:
                try:
                    if store.check([k]):
                        done.add(g)
                except Exception:  # noqa: BLE001 - the store went away: report what came
                    return sorted(done)
        if len(done) == world or time.monotonic() >= deadline:
            return sorted(done)
        time.sleep(0.05)


def user_environment() -> dict[str, str]:
    """The launcher's Flight Recorder settings as it started (the user's)."""
    return {
        k: v
        for k, v in os.environ.items()
        if k in (*_BUFFER_VARS, *_FILE_VARS, "TORCH_NCCL_DUMP_ON_TIMEOUT")
    }
