"""The barrier rendezvous's key layout on the c10d TCPStore, and who hosts the store.

All keys live under `relaunch/rdzv/<run_id>/` (a `PrefixStore`):

| key | written by | meaning |
| --- | --- | --- |
| `round` | compare_set | the open round R (the round nodes may close); created "0" |
| `closed` | set | the job ended (`succeeded`, `failed`, `stopped`); nobody may join |
| `closed/ack/<node>` | set | that node saw the end (the store host waits for these) |
| `round/<R>/open` | set | round R was opened (waiters wait on this key) |
| `round/<R>/count` | add | participants that joined round R (the add's result is the slot) |
| `round/<R>/p/<slot>` | set | the participant's descriptor (JSON) |
| `round/<R>/hb/<slot>` | set | its last keep-alive (wall-clock time), every keep-alive interval |
| `round/<R>/left/<slot>` | set | it left the round (failed health check, interrupted) |
| `round/<R>/result` | compare_set | the closed round: assignments (JSON); the first writer wins |
| `round/<R>/store/...` | the agent, the workers' bootstrap | the round's store for elastic |

Round fencing: R+1 is opened only by `compare_set(round, R, R+1)`, a round is closed only
by `compare_set(round/R/result, "", ...)` after checking that `round` still is R, and a
participant writes only under the round it joined. A node still acting on round R-1
writes keys nobody reads any more; it cannot close or change round R.

Store host: as torch's c10d rendezvous backend decides (`is_host` in `--rdzv-conf`, else
the launcher whose host name or address matches the endpoint's host tries to host it and
falls back to a client when the port is taken: on one machine the first launcher hosts).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from torch.distributed import PrefixStore, Store
from torch.distributed.elastic.rendezvous import RendezvousParameters


def create_store(params: RendezvousParameters) -> tuple[Store, bool]:
    """The TCPStore at `params.endpoint` and whether this process hosts it (torch's c10d
    backend's rule, `_create_tcp_store`, kept here so the launcher knows the answer)."""
    from torch.distributed import TCPStore
    from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError
    from torch.distributed.elastic.rendezvous.utils import (
        _matches_machine_hostname,
        parse_rendezvous_endpoint,
    )

    host, port = parse_rendezvous_endpoint(params.endpoint, default_port=29400)
    configured = params.get_as_bool("is_host")
    is_host = configured if configured is not None else _matches_machine_hostname(host)
    read_timeout = int(params.get_as_int("read_timeout", 60) or 60)
    for is_server in (is_host, False):
        try:
            store = TCPStore(
                host,
                port,
                is_master=is_server,
                multi_tenant=True,
                timeout=timedelta(seconds=read_timeout),
            )
            return store, is_server
        except (ValueError, RuntimeError, TimeoutError) as exc:
            if not is_server or configured is not None:
                raise RendezvousConnectionError(
                    f"cannot reach the rendezvous store at {host}:{port}: {exc}"
                ) from exc
    raise AssertionError("unreachable")


class Keys:
    """Key names of one rendezvous run (relative to the run's PrefixStore)."""

    ROUND = "round"
    CLOSED = "closed"

    @staticmethod
    def ack(node_id: str) -> str:
        return f"closed/ack/{node_id}"

    @staticmethod
    def opened(r: int) -> str:
        return f"round/{r}/open"

    @staticmethod
    def count(r: int) -> str:
        return f"round/{r}/count"

    @staticmethod
    def participant(r: int, slot: int) -> str:
        return f"round/{r}/p/{slot}"

    @staticmethod
    def heartbeat(r: int, slot: int) -> str:
        return f"round/{r}/hb/{slot}"

    @staticmethod
    def left(r: int, slot: int) -> str:
        return f"round/{r}/left/{slot}"

    @staticmethod
    def result(r: int) -> str:
        return f"round/{r}/result"

    @staticmethod
    def store_prefix(r: int) -> str:
        return f"round/{r}/store"


def run_store(store: Store, run_id: str) -> Store:
    return PrefixStore(f"relaunch/rdzv/{run_id}", store)


def get_str(store: Store, key: str) -> str | None:
    """The value of `key`, or None when it does not exist (never blocks)."""
    if not store.check([key]):
        return None
    return store.get(key).decode()


def get_int(store: Store, key: str, default: int = 0) -> int:
    value = get_str(store, key)
    return int(value) if value not in (None, "") else default


def cas(store: Store, key: str, expected: str, desired: str) -> str:
    """compare_set; returns the value now stored (desired when this call won)."""
    return store.compare_set(key, expected, desired).decode()


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True)
