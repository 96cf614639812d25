"""The workers' store of one rendezvous round, hosted by the launcher of group rank 0.

Workers bootstrap `torch.distributed` (env://) from MASTER_ADDR:MASTER_PORT. Left to torch
elastic, the launcher picks a free port, closes it, and worker rank 0 binds it seconds later
when it reaches `init_process_group`: on a host shared with other jobs that port can be taken
in between (the cycle fails with EADDRINUSE and spends a restart), or another job that was
handed the same number can find this job's store and join it. Here the launcher of group
rank 0 binds a fresh `TCPStore` server (port 0: the kernel's choice, never raced) for every
round it is active in and keeps it until the next round, and tells the workers to connect to
it as clients (`TORCHELASTIC_USE_AGENT_STORE=True`, as torch's dynamic rendezvous does). A
fresh server per round means a restarted cycle never reads keys of the one before.

`TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` (torch's spelling) restores the old behaviour, for a
workload that creates its own master store on MASTER_PORT.
"""

from __future__ import annotations

import os
from datetime import timedelta

from torch.distributed import Store, TCPStore
from torch.distributed.elastic.rendezvous import RendezvousStoreInfo

DISABLE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
SERVER_TIMEOUT = timedelta(minutes=30)


def sharing_enabled() -> bool:
    """Whether the launcher hosts the workers' store (default) or worker rank 0 does."""
    return os.environ.get(DISABLE_ENV, "0") != "1"


class WorkerStoreHost:
    """Hosts (on group rank 0) the workers' store of the current round; one per launcher."""

    def __init__(self, shared: bool | None = None) -> None:
        self.shared = sharing_enabled() if shared is None else shared
        self._server: TCPStore | None = None

    @property
    def port(self) -> int | None:
        """The port of the store this launcher hosts now, if any."""
        return None if self._server is None else self._server.port

    def bootstrap(self, group_rank: int, round_store: Store, addr: str) -> RendezvousStoreInfo:
        """The MASTER_ADDR/MASTER_PORT of this round, agreed through `round_store`.

        Group rank 0 binds the round's server first (when sharing) and publishes its port;
        the others read it. The previous round's server, if this launcher hosted one, is
        closed: its workers are gone by the time a new round is joined.
        """
        self.close()
        server_port: int | None = None
        if self.shared and group_rank == 0:
            self._server = TCPStore(
                host_name=addr,
                port=0,
                is_master=True,
                wait_for_workers=False,
                timeout=SERVER_TIMEOUT,
            )
            server_port = self._server.port
        return RendezvousStoreInfo.build(group_rank, round_store, addr, server_port=server_port)

    def close(self) -> None:
        """Drop the hosted server (the port is released when torch frees it)."""
        self._server = None
