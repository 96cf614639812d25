"""The workers' store of one rendezvous round, hosted by the launcher of group rank 0.

Workers bootstrap `torch.distributed` (env://) from MASTER_ADDR:MASTER_PORT. With a rendezvous
that does not share its store, torch elastic picks a free port, closes it, and worker rank 0
binds it seconds later when it reaches `init_process_group`: on a host shared with other jobs
that port can be taken in between (the cycle fails with EADDRINUSE and spends a restart), or
another job handed the same number can find this job's store and join it. Here the launcher
of group rank 0 binds a fresh `TCPStore` server (port 0: the kernel's choice, never raced) for
every round it is active in and keeps it until it next joins the rendezvous, and tells the
workers to connect to it as clients (`TORCHELASTIC_USE_AGENT_STORE=True`, the mechanism of
torch's dynamic rendezvous). A fresh server per round means a restarted cycle never reads
keys of the one before (torch 2.13's shared store keeps them).

The server listens on the node's address only (`rdzv.store.bound_listener`: loopback
for a job on one machine), not on every interface as torch's own server does. It speaks
torch's native protocol without authentication (the workers' `init_process_group` must
reach it), so its listening socket carries an accept filter (`launcher.rdzv.store_filter`):
only the addresses of the round's nodes, as the authenticated rendezvous admitted them,
and loopback may connect. See the threat model in docs/launcher.md.

If the server cannot start (its address does not resolve or connect from this host), the
round falls back to worker rank 0 hosting, with a warning: as before, never worse.
`TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` (torch's spelling) asks for that fallback always, for a
workload that binds MASTER_PORT itself (its own master TCPStore, a non-torch coordinator).

When the user gives `--master-port` (and the rendezvous runs there: no other
`--rdzv-endpoint`), the workers see exactly `--master-addr:--master-port`, as under torchrun:
`relaunch run` sets `RELAUNCH_WORKER_MASTER=ADDR:PORT` and the workers use the rendezvous
store at that port as their store, so a firewall that opens only that port suffices. torch
does not prefix the workers' keys per restart there, so group rank 0 deletes the previous
cycle's worker keys (every key outside the launcher's own `relaunch/` and `torchelastic/`
namespaces) before the round's workers start: a restarted cycle never reads a dead cycle's
addresses. Otherwise the per-round store above keeps its own port.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from datetime import timedelta

from torch.distributed import Store, TCPStore
from torch.distributed.elastic.rendezvous import RendezvousStoreInfo

from relaunch.launcher.rdzv.store import bound_listener

DISABLE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
MASTER_ENV = "RELAUNCH_WORKER_MASTER"  # ADDR:PORT the user gave (relaunch_cli.run_cmd)
_LAUNCHER_KEYS = ("relaunch/", "torchelastic/")


def requested_master() -> tuple[str, int] | None:
    """The (MASTER_ADDR, MASTER_PORT) the user asked the workers to see, if any."""
    addr, sep, port = os.environ.get(MASTER_ENV, "").rpartition(":")
    if not sep or not addr or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return addr, int(port)


def drop_worker_keys(store: Store) -> int:
    """Delete the keys earlier workers left in the rendezvous store; how many."""
    base = store
    while hasattr(base, "underlying_store"):
        base = base.underlying_store
    dropped = 0
    for key in base.list_keys():
        if not key.startswith(_LAUNCHER_KEYS):
            base.delete_key(key)
            dropped += 1
    return dropped


# How long the new server's own client may take to connect to it (torch connects one to
# `addr`): a host that cannot reach its own address falls back instead of hanging.
SELF_CONNECT_TIMEOUT = timedelta(seconds=30)


def sharing_enabled() -> bool:
    """Whether the launcher hosts the workers' store (default) or worker rank 0 does."""
    return os.environ.get(DISABLE_ENV, "0") != "1"


class WorkerStoreHost:
    """Hosts (on group rank 0) the workers' store of the current round; one per launcher."""

    def __init__(
        self,
        shared: bool | None = None,
        warn: Callable[[str], None] | None = None,
        server_factory: Callable[..., TCPStore] = TCPStore,
    ) -> None:
        self.wanted = sharing_enabled() if shared is None else shared
        self.shared = self.wanted  # this round's answer (False after a fallback)
        self.warn = warn or (lambda text: None)
        self._server_factory = server_factory
        self._server: TCPStore | None = None

    @property
    def port(self) -> int | None:
        """The port of the store this launcher hosts now, if any."""
        return None if self._server is None else self._server.port

    def bootstrap(
        self,
        group_rank: int,
        round_store: Store,
        addr: str,
        peers: Sequence[str] | None = None,
    ) -> RendezvousStoreInfo:
        """The MASTER_ADDR/MASTER_PORT of this round, agreed through `round_store`.
        `peers`: the addresses of the round's nodes (from the authenticated rendezvous):
        only they and loopback may connect to the store this launcher hosts
        (`launcher.rdzv.store_filter`); None: no filter.

        Group rank 0 binds the round's server first (when sharing) and publishes its port;
        the others read it. Only global rank 0 (on group rank 0) would ever host, so nodes
        that disagree on sharing still meet.
        """
        self.close()
        fixed = requested_master()
        if fixed is not None:  # as torchrun: the workers use the rendezvous store there
            self.shared = True
            if group_rank == 0:
                try:
                    drop_worker_keys(round_store)
                except (RuntimeError, AttributeError) as exc:
                    self.warn(f"cannot clear the workers' keys of the last cycle: {exc}")
            return RendezvousStoreInfo(master_addr=fixed[0], master_port=fixed[1])
        self.shared = self.wanted
        server_port: int | None = None
        if self.wanted and group_rank == 0:
            try:
                listener = bound_listener(addr, 0)  # this node's address only
                port = listener.getsockname()[1]
                if peers is not None:
                    self._admit_only(listener, peers)
                self._server = self._server_factory(
                    host_name=addr,
                    port=port,
                    is_master=True,
                    wait_for_workers=False,
                    timeout=SELF_CONNECT_TIMEOUT,
                    master_listen_fd=listener.detach(),  # the server owns and closes it
                    use_libuv=True,
                )
                server_port = self._server.port
            except (RuntimeError, ValueError, OSError) as exc:  # DistError included
                self.shared = False
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
                self.warn(
                    f"cannot host the workers' store at {addr} ({first}); "
                    "worker rank 0 hosts it this round"
                )
        return RendezvousStoreInfo.build(group_rank, round_store, addr, server_port=server_port)

    def _admit_only(self, listener: socket.socket, peers: Sequence[str]) -> None:
        """Attach the accept filter; a kernel that refuses it leaves the round unfiltered,
        with a warning (never a failed round)."""
        from relaunch.launcher.rdzv.store_filter import attach

        try:
            attach(listener, peers)
        except (OSError, ValueError) as exc:
            self.warn(f"the workers' store admits any address this round (accept filter: {exc})")

    def close(self) -> None:
        """Drop the hosted server: called when this launcher joins the next round (its
        workers are stopped by then), becomes a standby, or shuts down."""
        self._server = None
