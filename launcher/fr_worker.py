"""The worker side of the launcher's Flight Recorder requests (`launcher.fr_dumps`).

`start()` (called when a training script imports `relaunch.client` under the launcher)
starts one daemon thread that waits for the cycle's request file in `RELAUNCH_FR_DIR` and
then writes this rank's `_dump_fr_trace()` to `rank_<RANK>` (temporary name, then rename:
the launcher never reads half a dump). A thread, not a signal handler: a rank that hangs
is inside a C++ collective, where a Python signal handler would never run; the thread
takes the dump while the main thread waits. torch is only used when the script already
imported it; nothing here raises into the script.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from pathlib import Path

POLL_S = 0.1
_started = False
_stop = threading.Event()  # set at exit: the watcher ends before the interpreter does


def start() -> None:
    global _started
    where = os.environ.get("RELAUNCH_FR_DIR")
    if _started or not where:
        return
    _started = True
    rank = os.environ.get("RANK", "0")
    thread = threading.Thread(
        target=_watch, args=(Path(where), rank), name="relaunch-fr-dump", daemon=True
    )
    thread.start()

    def stop() -> None:
        _stop.set()
        thread.join(1.0)

    atexit.register(stop)


def _watch(where: Path, rank: str) -> None:
    request = where / "request"
    while not request.exists():
        if _stop.wait(POLL_S):
            return
    try:
        dump(where, rank)
    except Exception as exc:  # noqa: BLE001 - no torch, no process group: the launcher counts what came
        print(f"relaunch: flight recorder dump of rank {rank} failed: {exc}", file=sys.stderr)


def dump(where: Path, rank: str) -> Path | None:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    data = torch._C._distributed_c10d._dump_fr_trace()
    target = where / f"rank_{rank}"
    tmp = where / f".rank_{rank}.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, target)
    return target
