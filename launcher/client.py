"""The worker-side API of `relaunch run`: heartbeats, named sections, progress reports.

Use it from the training script (stdlib only, cheap to import, safe outside the launcher):

    from relaunch.client import heartbeat, section, report_progress, start_heartbeat

    start_heartbeat(interval=5.0)          # optional background heartbeat thread
    for it in range(start, steps):
        with section("step"):              # a section counts as a heartbeat at entry and exit
            train_step()
        heartbeat()                         # explicit heartbeat
        report_progress(iteration=it, checkpoint=path_or_None)

    from relaunch.client import straggler   # straggler detection (docs/straggler.md)
    with straggler.section("fwd"):         # timed per rank, summarised per report interval
        loss = model(batch)

Each call sends one JSON datagram to the launcher's Unix socket (`RELAUNCH_FT_SOCKET`).
Sending never blocks for long and never raises: when the launcher is gone or the script
runs without it, the calls do nothing. Importing this module says `hello` to the
launcher: from then on the rank is supervised for hangs, with the initial heartbeat
timeout until its first heartbeat (import it at the top of the script, before the slow
initialisation) and the heartbeat timeout after that.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from relaunch.launcher.heartbeat_message import HeartbeatMessage
from relaunch.launcher.straggler.worker import StragglerTimer

__all__ = [
    "heartbeat",
    "section",
    "report_progress",
    "report_checkpoint",
    "start_heartbeat",
    "stop_heartbeat",
    "straggler",
]

_lock = threading.Lock()
_sock: socket.socket | None = None
_said_hello = False
_bg: threading.Thread | None = None
_bg_stop = threading.Event()
_open: list[str] = []  # the sections this process is in, innermost last (guarded by _lock)
_WAIT_S = 1.0  # longest a progress report waits for the launcher


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _cycle() -> int:
    return int(os.environ.get("RELAUNCH_CYCLE", "-1"))


def _send(kind: str, enter: str | None = None, leave: bool = False, **fields: Any) -> None:
    global _sock, _said_hello
    path = os.environ.get("RELAUNCH_FT_SOCKET")
    if not path:
        return
    with _lock:
        if enter is not None:
            _open.append(enter)
        elif leave and _open:
            _open.pop()
        try:
            if _sock is None:
                _sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            if not _said_hello and kind != "hello":
                _sock.settimeout(_WAIT_S)
                _sock.sendto(HeartbeatMessage(_rank(), _cycle(), "hello").encode(), path)
            _said_hello = True
            # every message says which section the process is in now ("o", innermost open
            # section or null): a section marker lost to a full queue is corrected by the
            # next message, so a hang report never names a section the rank already left
            msg = HeartbeatMessage(
                _rank(),
                _cycle(),
                kind,
                sent_at=time.monotonic(),
                open_section=_open[-1] if _open else None,
                open_said=True,
                fields=fields,
            )
            # progress, straggler summaries and section markers should not be lost: wait
            # briefly for room in the launcher's queue; a heartbeat that finds it full is
            # dropped (the next will do)
            waits = kind in ("progress", "hello", "strag", "sec_start", "sec_end")
            _sock.settimeout(_WAIT_S if waits else 0.0)
            _sock.sendto(msg.encode(), path)
        except OSError:
            pass  # launcher gone or queue full: a lost heartbeat is not an error


def heartbeat() -> None:
    """Tell the launcher this rank is alive."""
    _send("hb")


@contextmanager
def section(name: str) -> Iterator[None]:
    """Mark a named section (e.g. "step", "checkpoint"); named in a hang report."""
    _send("sec_start", enter=str(name), s=str(name))
    try:
        yield
    finally:
        _send("sec_end", leave=True, s=str(name))


def report_progress(*, iteration: int | None = None, checkpoint: str | None = None) -> None:
    """Report training progress; it appears in the cycle log and protects restarts."""
    fields: dict[str, Any] = {}
    if iteration is not None:
        fields["i"] = int(iteration)
    if checkpoint is not None:
        fields["ckpt"] = str(checkpoint)
    _send("progress", **fields)


def report_checkpoint(*, step: int, path: str, tier: str, size: int, duration: float) -> None:
    """Report a completed checkpoint (relaunch.checkpoint calls it): step, where it is,
    its tier (local | persistent), bytes and seconds from save to visible. It becomes a
    `checkpoint` launcher fact, and the restarted worker is told the newest (env)."""
    _send(
        "progress",
        ckpt=str(path),
        cs=int(step),
        ct=str(tier),
        cb=int(size),
        cd=round(float(duration), 3),
    )


def start_heartbeat(interval: float = 5.0) -> None:
    """Start a daemon thread that heartbeats every `interval` seconds (idempotent).

    It proves the process is alive, not that training advances: a rank stuck in a
    collective keeps heart-beating. Prefer explicit `heartbeat()` in the training loop.
    """
    global _bg
    if _bg is not None and _bg.is_alive():
        return
    _bg_stop.clear()

    def loop() -> None:
        while not _bg_stop.wait(interval):
            heartbeat()

    heartbeat()
    _bg = threading.Thread(target=loop, name="relaunch-heartbeat", daemon=True)
    _bg.start()


def stop_heartbeat() -> None:
    """Stop the background heartbeat thread, if any."""
    _bg_stop.set()


straggler = StragglerTimer(_send)  # off unless the launcher set a report interval

_send("hello")  # the rank is supervised from here (see the module docstring)

# Flight Recorder dumps on the launcher's request (launcher.fr_worker): a daemon thread,
# only under the launcher (RELAUNCH_FR_DIR set)
from relaunch.launcher import fr_worker as _fr_worker  # noqa: E402

_fr_worker.start()
