"""`SignalState`: the signals `relaunch run` received and what a later one asks for.

One per process (`launcher.agent.SIGNALS`): the handler of SIGINT, SIGTERM, SIGHUP and
SIGQUIT records each signal here; the first raises a `SignalException` in the main thread,
later ones only call the functions registered in `on_later` (they set flags, take no lock).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from typing import Any

from torch.distributed.elastic.multiprocessing.api import SignalException

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class SignalState:
    def __init__(self) -> None:
        self.received: list[signal.Signals] = []  # signals received, in order
        self.on_later: list[Callable[[], Any]] = []  # called for every signal after the first

    def clear(self) -> None:
        """Forget the signals of an earlier launch in this process."""
        self.received.clear()

    def first(self) -> signal.Signals | None:
        """The first signal received, if any."""
        return self.received[0] if self.received else None

    def handle(self, signum: int, frame: Any) -> None:
        """The first signal becomes a SignalException in the main thread, like elastic's own
        handler; it is also remembered, so that one swallowed by a broad `except Exception`
        on its way (in elastic or a library) is raised again at the agent's next step
        (`RelaunchAgent._check_signal`).

        Later signals never raise: they arrive while the launcher stops the workers and
        flushes, or while the interpreter shuts down. An exception there (the old behaviour,
        e.g. a second Ctrl-C) interrupts `threading._shutdown` or an atexit finalizer such as
        the one that joins elastic's rendezvous keep-alive thread; that thread is then still
        inside a TCPStore call when the interpreter finalizes, and the forced unwind of a
        thread that cannot get the GIL back through C++ ends in `std::terminate`
        ("terminate called without an active exception", exit 134). A later signal only asks
        to abandon the history flush (`on_later`: sets flags, takes no lock)."""
        sig = signal.Signals(signum)
        self.received.append(sig)
        if len(self.received) > 1:
            for fn in list(self.on_later):
                fn()
            return
        raise SignalException(f"process {os.getpid()} got signal {signum}", sig)

    def install(self) -> dict[signal.Signals, Any]:
        """Make `handle` the handler of `HANDLED_SIGNALS` (where this is the main thread);
        returns the handlers replaced."""
        previous: dict[signal.Signals, Any] = {}
        for sig in HANDLED_SIGNALS:
            with contextlib.suppress(ValueError, OSError):  # not the main thread: leave as is
                previous[sig] = signal.signal(sig, self.handle)
        return previous
