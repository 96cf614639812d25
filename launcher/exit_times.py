"""When each worker process exited, to the millisecond, without reaping it (Linux pidfds).

Elastic notices dead workers at its monitor ticks (0.1 s): two ranks that die within one
tick (a SIGKILL and the peer it takes down with it) look simultaneous. `ExitTimes`
watches each worker's pidfd on one thread and records the monotonic time it became
readable (the process exited); elastic still reaps the processes. The `rank_exit` facts
use these times (`t_s`), so the initiating failure is the earliest. Where pidfds are not
available (not Linux, old kernel) nothing is recorded and the callers fall back.
"""

from __future__ import annotations

import os
import select
import threading
import time


class ExitTimes:
    """Exit times of one cycle's workers, keyed by global rank."""

    def __init__(self, pids: dict[int, int]) -> None:
        """`pids`: global rank -> process id."""
        self._times: dict[int, float] = {}
        self._lock = threading.Lock()
        self._fds: dict[int, int] = {}
        for rank, pid in pids.items():
            try:
                self._fds[os.pidfd_open(pid)] = rank
            except (AttributeError, OSError):  # no pidfd here, or already gone
                continue
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="relaunch-exit-times", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        poller = select.poll()
        for fd in [*self._fds, self._stop_r]:
            poller.register(fd, select.POLLIN)
        while self._fds:
            for fd, _ in poller.poll():
                if fd == self._stop_r:
                    return
                now = time.monotonic()
                rank = self._fds.pop(fd, None)
                poller.unregister(fd)
                os.close(fd)
                if rank is not None:
                    with self._lock:
                        self._times[rank] = now

    def get(self, rank: int) -> float | None:
        """The monotonic time rank `rank`'s process exited, if seen."""
        with self._lock:
            return self._times.get(rank)

    def close(self) -> None:
        os.write(self._stop_w, b"x")
        self._thread.join(5.0)
        for fd in list(self._fds):
            os.close(fd)
        self._fds.clear()
        os.close(self._stop_r)
        os.close(self._stop_w)
