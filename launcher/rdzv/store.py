"""The barrier rendezvous's key layout on the c10d TCPStore, who hosts the store and on
which interface, and `RunStore`: the run's keys with signed values (`launcher.rdzv.auth`).

All keys live under `relaunch/rdzv/<run_id>/<tag>/` (the tag is derived from the job's
secret, `rdzv.auth.key_prefix`). Every string value relaunch writes is signed; counters
(`add`) are not (the store keeps them as integers) but nobody without the secret can
address them.

| key | written by | meaning |
| --- | --- | --- |
| `round` | compare_set | the open round R (the round nodes may close); created "0" |
| `closed` | compare_set | the job ended (`succeeded`, `failed`, `stopped`); nobody may join |
| `closed/acks` | append | node ids that saw the end, one a line (the store host waits) |
| `round/<R>/open` | set | round R was opened |
| `round/<R>/count` | add | participants that took a slot in round R (the add's result) |
| `round/<R>/p/<slot>` | set | the participant's descriptor (JSON) |
| `round/<R>/hb/<slot>` | set | its last keep-alive (wall-clock time), or `left` |
| `round/<R>/arrived` | add | participants whose descriptor and keep-alive are written |
| `round/<R>/gone` | add | participants that left round R |
| `round/<R>/lead` | compare_set | the slot that watches round R's keep-alives (absent: 0) |
| `round/<R>/result` | compare_set | the closed round: assignments (JSON); the first writer wins |
| `round/<R>/size` | set | how many nodes the closed round assigned (for R+1's counters) |
| `round/<R>/decided` | set | wakes R's waiters: result written, R+1 opened or job closed |
| `round/<R>/end` | set | wakes R's standbys and runners: R+1 opened or job closed |
| `round/<R>/store/...` | the agent, the workers' bootstrap | the round's store for elastic |

Round fencing: R+1 is opened only by `compare_set(round, R, R+1)`, a round is closed only
by `compare_set(round/R/result, "", ...)` after checking that `round` still is R, and a
participant writes only under the round it joined. A node still acting on round R-1
writes keys nobody reads any more; it cannot close or change round R.

Store host: as torch's c10d rendezvous backend decides (`is_host` in `--rdzv-conf`, else
the launcher whose host name or address matches the endpoint's host tries to host it and
falls back to a client when the port is taken: on one machine the first launcher hosts).
The host binds the store to the endpoint's address only (`bound_listener`: a socket
handed to torch as `master_listen_fd`), not to every interface as torch does (except a
name that resolves to loopback only on this machine, see `bound_listener`); a second
launcher on the same machine finds the port taken (EADDRINUSE) and becomes a client.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from torch.distributed import Store
from torch.distributed.elastic.rendezvous import RendezvousParameters

from relaunch.launcher.rdzv.auth import key_prefix, sign, verify

LEFT = "left"  # the keep-alive value of a participant that left its round


def is_loopback_name(host: str) -> bool:
    """A loopback address or `localhost` as written (not a name that happens to resolve
    to one)."""
    return host in ("localhost", "::1") or host.startswith("127.")


def bound_listener(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host`'s address (the interface the job uses), port
    `port` (0: the kernel's choice). OSError when the address is not this machine's.

    A host name that resolves to a loopback address here but is not one as written (a
    Debian-style `127.0.1.1 node0` line in /etc/hosts) would be reached by other nodes on
    its real address: such a name binds every interface, as torch does."""
    family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    if ipaddress.ip_address(addr[0]).is_loopback and not is_loopback_name(host):
        addr = ("::", port, 0, 0) if family == socket.AF_INET6 else ("0.0.0.0", port)
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(4096)
    except OSError:
        sock.close()
        raise
    return sock


def create_store(params: RendezvousParameters) -> tuple[Store, bool]:
    """The TCPStore at `params.endpoint` and whether this process hosts it (torch's c10d
    backend's rule, `_create_tcp_store`, kept here so the launcher knows the answer). The
    host binds it to the endpoint's address only."""
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
            fd: int | None = None
            if is_server:
                listener = bound_listener(host, port)
                port = listener.getsockname()[1]
                fd = listener.detach()  # torch's server owns (and closes) it from here
            store = TCPStore(
                host,
                port,
                is_master=is_server,
                multi_tenant=False,
                master_listen_fd=fd,
                timeout=timedelta(seconds=read_timeout),
                use_libuv=True,
            )
            return store, is_server
        except (ValueError, RuntimeError, TimeoutError, OSError) as exc:
            if not is_server or configured is not None:
                raise RendezvousConnectionError(
                    f"cannot reach the rendezvous store at {host}:{port}: {exc}"
                ) from exc
    raise AssertionError("unreachable")


class Keys:
    """Key names of one rendezvous run (relative to the run's prefix)."""

    ROUND = "round"
    CLOSED = "closed"
    ACKS = "closed/acks"

    @staticmethod
    def opened(r: int) -> str:
        return f"round/{r}/open"

    @staticmethod
    def count(r: int) -> str:
        return f"round/{r}/count"

    @staticmethod
    def arrived(r: int) -> str:
        return f"round/{r}/arrived"

    @staticmethod
    def gone(r: int) -> str:
        return f"round/{r}/gone"

    @staticmethod
    def lead(r: int) -> str:
        return f"round/{r}/lead"

    @staticmethod
    def participant(r: int, slot: int) -> str:
        return f"round/{r}/p/{slot}"

    @staticmethod
    def heartbeat(r: int, slot: int) -> str:
        return f"round/{r}/hb/{slot}"

    @staticmethod
    def result(r: int) -> str:
        return f"round/{r}/result"

    @staticmethod
    def size(r: int) -> str:
        return f"round/{r}/size"

    @staticmethod
    def decided(r: int) -> str:
        return f"round/{r}/decided"

    @staticmethod
    def end(r: int) -> str:
        return f"round/{r}/end"

    @staticmethod
    def store_prefix(r: int) -> str:
        return f"round/{r}/store"


class RunStore:
    """One run's keys on the store: values signed on write and verified on read (a
    forged one raises `rdzv.auth.ForgedValue`), counters and waits passed through. Every
    method is one store round trip, except `read` of a key that may be absent (two)."""

    def __init__(self, store: Store, run_id: str, secret: bytes | None) -> None:
        from torch.distributed import PrefixStore

        self.secret = secret
        self.prefix = key_prefix(secret, run_id)
        self.raw = store
        self.store = PrefixStore(self.prefix, store)

    def write(self, key: str, value: str) -> None:
        self.store.set(key, sign(self.secret, key, value))

    def write_many(self, items: dict[str, str]) -> None:
        keys = list(items)
        values = [sign(self.secret, k, items[k]) for k in keys]
        self.store.multi_set(keys, values)  # type: ignore[attr-defined]  # not in the stubs

    def get(self, key: str) -> str:
        """The value of a key that exists (blocks until it does, up to the timeout)."""
        return verify(self.secret, key, self.store.get(key))

    def read(self, key: str) -> str | None:
        """The value of `key`, or None when it does not exist (never blocks)."""
        if not self.store.check([key]):
            return None
        return self.get(key)

    def read_int(self, key: str, default: int = 0) -> int:
        value = self.read(key)
        return int(value) if value not in (None, "") else default

    def get_many(self, keys: Sequence[str]) -> list[str]:
        """Values of keys that all exist, in one round trip."""
        if not keys:
            return []
        raw = self.store.multi_get(list(keys))
        return [verify(self.secret, k, v) for k, v in zip(keys, raw, strict=True)]

    def exists(self, key: str) -> bool:
        return bool(self.store.check([key]))

    def cas(self, key: str, expected: str, desired: str) -> str:
        """compare_set of signed values ("" expected: the key is absent); returns the value
        now stored (desired when this call won)."""
        want = sign(self.secret, key, expected) if expected else ""
        now = self.store.compare_set(key, want, sign(self.secret, key, desired))
        return verify(self.secret, key, now)

    def add(self, key: str, amount: int) -> int:
        return int(self.store.add(key, amount))

    def append(self, key: str, text: str) -> None:
        self.store.append(key, text)  # type: ignore[attr-defined]  # not in the stubs

    def raw_get(self, key: str) -> str | None:
        if not self.store.check([key]):
            return None
        return bytes(self.store.get(key)).decode(errors="replace")


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True)
