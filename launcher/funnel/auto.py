"""`--ft-log-funnel auto`: the log funnel writer started by group rank 0's launcher.

No hand-started writer: after each rendezvous, the launcher of group rank 0 starts the
writer once (`FunnelServer`, root = its job log folder, any free port) and publishes its
address in the round's store (`relaunch/funnel/address`); every other node reads it there
and streams its cycle log to it (`FunnelSink`). A writer that dies, or an address not
published within `WAIT_S`, falls back as with a fixed address: the node's cycle log goes to
its local file, with a warning line. Loopback rendezvous (127.x, localhost, ::1): the
writer listens on 127.0.0.1; else on all addresses, published as `--local-addr` or this
host's name.
"""

from __future__ import annotations

import socket
from datetime import timedelta
from pathlib import Path
from typing import Any

KEY = "relaunch/funnel/address"
WAIT_S = 60.0


def _loopback(endpoint: str) -> bool:
    host = endpoint.rsplit(":", 1)[0].strip("[]")
    return host.startswith("127.") or host in ("localhost", "::1")


class AutoFunnel:
    """One per launcher: `address(store, group_rank)` after each rendezvous."""

    def __init__(self, job_dir: Path, rdzv_endpoint: str, local_addr: str | None = None) -> None:
        self.job_dir = job_dir
        loop = _loopback(rdzv_endpoint)
        self.bind = "127.0.0.1" if loop else "0.0.0.0"  # the job's nodes reach it
        self.public = "127.0.0.1" if loop else (local_addr or socket.getfqdn())
        self._server: Any = None

    def address(self, store: Any, group_rank: int) -> str:
        if group_rank == 0:
            if self._server is None:
                from relaunch.launcher.funnel import FunnelServer

                server = FunnelServer(self.job_dir, host=self.bind, port=0)
                server.start()
                self._server = server
            addr = f"{self.public}:{self._server.port}"
            store.set(KEY, addr)
            return addr
        store.wait([KEY], timedelta(seconds=WAIT_S))
        value = store.get(KEY)
        return value.decode() if isinstance(value, bytes) else str(value)

    @property
    def serving(self) -> bool:
        return self._server is not None

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
