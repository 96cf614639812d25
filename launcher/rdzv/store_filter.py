"""An accept filter for the workers' store: only the round's nodes (and loopback) connect.

torch's `TCPStore` speaks a native protocol without authentication, and the workers'
`init_process_group` must reach it, so its traffic cannot be signed. What can be decided is
*who connects*: the launcher of group rank 0 binds the store's listening socket itself
(`launcher.rdzv.worker_store`) and, before handing it to torch, attaches a classic BPF socket
filter (`SO_ATTACH_FILTER`, no privilege needed) that admits packets only from the source
addresses of the nodes the authenticated rendezvous admitted to the round (their signed
descriptors, `launcher.rdzv.barrier`) plus 127.0.0.1 and ::1. The kernel drops any other
peer's packets, its connection attempt included, before torch sees them; accepted
connections inherit the filter. So a host on the job network that is not one of the
round's nodes can neither read nor write the store.

The program: the IP version from the network header (`SKF_NET_OFF`), then the IPv4 source
(offset 12) or the four words of the IPv6 source (offset 8) compared with each admitted
address; anything else is dropped. The program may hold `BPF_MAXINSNS` instructions: 2 per
IPv4 address, 9 per IPv6 one, so up to 2,043 IPv4 nodes (a 1,024-node job fits twice);
beyond that the round runs unfiltered, with a warning.
"""

from __future__ import annotations

import ctypes
import ipaddress
import socket
import struct
from collections.abc import Iterable

SO_ATTACH_FILTER = 26  # Linux
SKF_NET_OFF = -0x100000  # loads relative to the network header
BPF_MAXINSNS = 4096  # the kernel's limit on a classic BPF program
LOOPBACK = ("127.0.0.1", "::1")

_LD_W_ABS, _LD_B_ABS, _ALU_AND_K = 0x20, 0x30, 0x54
_JEQ_K, _JA, _RET_K = 0x15, 0x05, 0x06
_ACCEPT, _DROP = 0xFFFFFFFF, 0


def _ins(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _net(offset: int) -> int:
    return SKF_NET_OFF + offset


def resolve(hosts: Iterable[str]) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The IP addresses of `hosts` (addresses or names; a name that does not resolve is
    left out: its node could not be reached either)."""
    out: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()
    for host in hosts:
        if not host:
            continue
        try:
            out.add(ipaddress.ip_address(host.strip("[]")))
            continue
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError:
            continue
        for info in infos:
            addr = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
            out.add(addr)
    return out


def program(addresses: Iterable[ipaddress.IPv4Address | ipaddress.IPv6Address]) -> list[bytes]:
    """The filter's instructions admitting exactly `addresses` as source (ValueError when
    they need more than BPF_MAXINSNS instructions)."""
    addrs = set(addresses)
    v4 = sorted(int(a) for a in addrs if a.version == 4)
    v6 = sorted(a.packed for a in addrs if a.version == 6)
    block4 = [_ins(_LD_W_ABS, 0, 0, _net(12))]
    for a in v4:
        block4 += [_ins(_JEQ_K, 0, 1, a), _ins(_RET_K, 0, 0, _ACCEPT)]
    block4.append(_ins(_RET_K, 0, 0, _DROP))
    block6: list[bytes] = []
    for packed in v6:
        words = struct.unpack("!IIII", packed)
        for i, w in enumerate(words):  # a mismatch skips the rest of this address's block
            block6 += [_ins(_LD_W_ABS, 0, 0, _net(8 + 4 * i)), _ins(_JEQ_K, 0, 7 - 2 * i, w)]
        block6.append(_ins(_RET_K, 0, 0, _ACCEPT))
    block6.append(_ins(_RET_K, 0, 0, _DROP))
    head = [
        _ins(_LD_B_ABS, 0, 0, _net(0)),
        _ins(_ALU_AND_K, 0, 0, 0xF0),
        _ins(_JEQ_K, 0, 1, 0x40),
        _ins(_JA, 0, 0, 3),  # to block4 (after the 3 instructions below)
        _ins(_JEQ_K, 0, 1, 0x60),
        _ins(_JA, 0, 0, 1 + len(block4)),  # to block6
        _ins(_RET_K, 0, 0, _DROP),  # neither IPv4 nor IPv6
    ]
    code = head + block4 + block6
    if len(code) > BPF_MAXINSNS:
        raise ValueError(
            f"{len(addrs)} addresses need {len(code)} filter instructions: more than {BPF_MAXINSNS}"
        )
    return code


def attach(sock: socket.socket, hosts: Iterable[str]) -> int:
    """Admit only `hosts` (and loopback) as peers of the listening `sock`; returns how
    many addresses are admitted. OSError when the kernel refuses the filter, ValueError
    when there are too many addresses."""
    addrs = resolve([*hosts, *LOOPBACK])
    install(sock, addrs)
    return len(addrs)


def install(
    sock: socket.socket, addrs: Iterable[ipaddress.IPv4Address | ipaddress.IPv6Address]
) -> None:
    """Attach the filter admitting exactly `addrs` (no loopback added) to `sock`."""
    code = b"".join(program(addrs))
    buf = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("HL", len(code) // 8, ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)  # the kernel copies it
