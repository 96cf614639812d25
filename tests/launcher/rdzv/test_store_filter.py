"""The workers' store's accept filter (`launcher.rdzv.store_filter`), on real sockets and a real
torch `TCPStore`: an admitted address reads and writes the store, any other source address
(127.0.0.2 stands for another host on the job network) cannot even connect. A dropped
connection attempt fails whatever the time allowed; an admitted one answers at once."""

from __future__ import annotations

import ipaddress
import socket
from datetime import timedelta

import pytest

from relaunch.launcher.rdzv.store_filter import BPF_MAXINSNS, attach, install, program

REFUSED_AFTER_S = 3.0  # how long an outsider's connection attempt is given (it never lands)


def _bindable(addr: str) -> bool:
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    try:
        with socket.socket(family) as s:
            s.bind((addr, 0))
    except OSError:
        return False
    return True


def _connects(dest: tuple[str, int], source: str) -> bool:
    family = socket.AF_INET6 if ":" in source else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((source, 0))
        s.settimeout(REFUSED_AFTER_S)
        try:
            s.connect(dest)
        except OSError:
            return False
        return True


def test_an_outsider_cannot_reach_a_filtered_tcpstore() -> None:
    if not _bindable("127.0.0.2"):
        pytest.skip("127.0.0.2 cannot be bound here (no 127/8 on loopback)")
    from torch.distributed import TCPStore

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    assert attach(listener, ["127.0.0.1"]) == 2  # and ::1
    port = listener.getsockname()[1]
    server = TCPStore(
        "127.0.0.1", port, is_master=True, wait_for_workers=False,
        timeout=timedelta(seconds=30), master_listen_fd=listener.detach(), use_libuv=True,
    )  # fmt: skip
    client = TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=30))
    client.set("k", "v")  # an admitted peer reads and writes
    assert server.get("k") == b"v" and client.get("k") == b"v"
    assert _connects(("127.0.0.1", port), "127.0.0.1")
    assert not _connects(("127.0.0.1", port), "127.0.0.2")  # no connection: no read, no write
    assert server.get("k") == b"v"


def test_the_program_compares_ipv6_sources_word_by_word() -> None:
    if not _bindable("::1"):
        pytest.skip("no IPv6 loopback here")
    for admitted, lands in (["::1"], True), (["::2", "127.0.0.1"], False):
        with socket.socket(socket.AF_INET6) as listener:
            listener.bind(("::1", 0))
            listener.listen(8)
            install(listener, [ipaddress.ip_address(a) for a in admitted])
            assert _connects(("::1", listener.getsockname()[1]), "::1") is lands


def test_too_many_addresses_are_refused_not_truncated() -> None:
    """The bound is the kernel's program size: 2 instructions per IPv4 address, so a
    1,024-node job's addresses fit (the kernel takes the filter), 2,044 do not."""
    fit = (BPF_MAXINSNS - 10) // 2  # head 7, a load, the two drops
    many = [
        ipaddress.ip_address(f"10.{i // 62500}.{i // 250 % 250}.{i % 250 + 1}")
        for i in range(fit + 1)
    ]
    with pytest.raises(ValueError, match="more than 4096"):
        program(many)
    assert len(program(many[:fit])) == BPF_MAXINSNS
    with socket.socket() as listener:  # the kernel accepts a 1,024-node filter
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        install(listener, [*many[:1024], ipaddress.ip_address("127.0.0.1")])
        assert _connects(("127.0.0.1", listener.getsockname()[1]), "127.0.0.1")
