"""The worker side of the launcher's Flight Recorder requests (`launcher.fr_dumps`).

`start()` (called when a training script imports `relaunch.client` under the launcher)
starts one daemon thread that waits for the cycle's request file in `RELAUNCH_FR_DIR` and
then writes this rank's `_dump_fr_trace()` to `rank_<RANK>` (temporary name, then rename:
the launcher never reads half a dump). A thread, not a signal handler: a rank that hangs
is inside a C++ collective, where a Python signal handler would never run; the thread
takes the dump while the main thread waits. torch is only used when the script already
imported it; nothing here raises into the script.

A collective that times out: gloo (torch 2.13) takes no dump of its own on a timeout (it
raises `RuntimeError: [.../gloo/...] Timed out waiting Nms for recv operation`; torch's
dump-on-timeout, `TORCH_NCCL_DUMP_ON_TIMEOUT`, is NCCL's watchdog only). So `start()` also
wraps `sys.excepthook`: an uncaught exception that says a collective timed out
(`is_timeout`) first writes this rank's dump, unasked, then the script dies as before. The
launcher sees a dump from a rank that failed and asks the surviving ranks for theirs
before it stops them (`launcher.agent`), so the rank that never entered the collective is
in the dumps too.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
import threading
from pathlib import Path
from types import TracebackType

POLL_S = 0.1
# gloo's "Timed out waiting 3000ms for recv operation", c10d's "... timed out", NCCL's
# watchdog "Watchdog caught collective operation timeout"
_TIMEOUT = re.compile(r"timed out|operation timeout|DistTimeoutError", re.IGNORECASE)
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
    _hook_timeouts(Path(where), rank)


def is_timeout(exc: BaseException) -> bool:
    """The exception (or one it came from) says a collective timed out."""
    seen: BaseException | None = exc
    for _ in range(8):  # a bounded walk of the cause chain
        if seen is None:
            return False
        if _TIMEOUT.search(f"{type(seen).__name__}: {seen}"):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _hook_timeouts(where: Path, rank: str) -> None:
    previous = sys.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if is_timeout(exc) and not (where / f"rank_{rank}").exists():
            try:
                if dump(where, rank) is not None:
                    print(
                        f"relaunch: rank {rank}: collective timed out; flight recorder "
                        "dump written",
                        file=sys.stderr,
                    )
            except Exception as err:  # noqa: BLE001 - a failed dump must not hide the error
                print(
                    f"relaunch: flight recorder dump of rank {rank} failed: {err}", file=sys.stderr
                )
        previous(kind, exc, tb)

    sys.excepthook = hook


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
