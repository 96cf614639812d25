"""NIC link state from sysfs: Ethernet interfaces up with carrier, InfiniBand ports ACTIVE.

Which links: the names given (`eth0`, `mlx5_0` for every port of an HCA, `mlx5_0:1` for
one port), or by default those up when the launcher started (an interface that is down
from the start is not this job's link). A watched link that goes down, loses its carrier,
leaves ACTIVE or disappears fails the check. Reads `<sysfs>/class/net/<if>/operstate` and
`carrier`, and `<sysfs>/class/infiniband/<dev>/ports/<n>/state` (`4: ACTIVE`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from relaunch.launcher.health.report import CheckResult
from relaunch.launcher.sysfs import read_text, sysfs_root

CHECK_NAME = "nic_link"


@dataclass(frozen=True)
class Link:
    """One watched link: an Ethernet-style interface or one InfiniBand port."""

    kind: str  # "net" | "ib"
    name: str  # interface name, or HCA name
    port: str = ""  # IB port number

    @property
    def label(self) -> str:
        return f"{self.name}:{self.port}" if self.kind == "ib" else self.name


def _net_dir(root: Path) -> Path:
    return root / "class" / "net"


def _ib_dir(root: Path) -> Path:
    return root / "class" / "infiniband"


def _ib_ports(root: Path, dev: str) -> list[str]:
    ports = _ib_dir(root) / dev / "ports"
    try:
        return sorted((p.name for p in ports.iterdir()), key=lambda n: (len(n), n))
    except OSError:
        return []


def _listdir(path: Path) -> list[str]:
    try:
        return sorted(p.name for p in path.iterdir())
    except OSError:
        return []


def link_state(root: Path, link: Link) -> tuple[bool, str]:
    """(up, what was read) for one link."""
    if link.kind == "ib":
        state = read_text(_ib_dir(root) / link.name / "ports" / link.port / "state")
        if state is None:
            return False, "port state not readable (port gone?)"
        return "ACTIVE" in state.upper(), f"state {state!r}"
    base = _net_dir(root) / link.name
    oper = read_text(base / "operstate")
    if oper is None:
        return False, "operstate not readable (interface gone?)"
    carrier = read_text(base / "carrier")  # EINVAL while the interface is down: None
    if oper.lower() != "up":
        return False, f"operstate {oper!r}"
    if carrier is not None and carrier != "1":
        return False, f"operstate 'up' but carrier {carrier!r}"
    return True, "operstate 'up'" + (f", carrier {carrier}" if carrier is not None else "")


def links_up_now(root: Path) -> list[Link]:
    """The links up at this moment (loopback excluded): the default set to watch."""
    out: list[Link] = []
    for name in _listdir(_net_dir(root)):
        link = Link("net", name)
        if name != "lo" and link_state(root, link)[0]:
            out.append(link)
    for dev in _listdir(_ib_dir(root)):
        for port in _ib_ports(root, dev):
            link = Link("ib", dev, port)
            if link_state(root, link)[0]:
                out.append(link)
    return out


def _check_name(dev: str, given: str) -> None:
    """A device name is one sysfs entry: no '/', not '.' or '..', no blanks (ValueError)."""
    if not dev or dev in (".", "..") or "/" in dev or any(c.isspace() for c in dev):
        raise ValueError(f"NIC {given!r} is not an interface or HCA name")


def parse_links(root: Path, names: Sequence[str]) -> list[Link]:
    """`eth0`, `mlx5_0` (all its ports) or `mlx5_0:1`. A name found under neither
    class/net nor class/infiniband raises ValueError."""
    out: list[Link] = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        dev, sep, port = name.partition(":")
        _check_name(dev, name)
        if sep:
            if not port.isdigit():
                raise ValueError(f"NIC {name!r}: the port after ':' must be a number")
            if not (_ib_dir(root) / dev / "ports" / port).is_dir():
                raise ValueError(f"NIC {name!r}: no port {port} under {_ib_dir(root) / dev}")
            out.append(Link("ib", dev, port))
        elif (_net_dir(root) / name).exists():
            out.append(Link("net", name))
        elif (_ib_dir(root) / name).exists():
            out.extend(Link("ib", name, p) for p in _ib_ports(root, name))
        else:
            raise ValueError(f"NIC {name!r} not found under {_net_dir(root)} or {_ib_dir(root)}")
    return out


class NicCheck:
    """Watches a fixed set of links, chosen at construction (default: those up then)."""

    def __init__(
        self,
        interfaces: Sequence[str] | None = None,
        *,
        root: str | os.PathLike[str] | None = None,
    ) -> None:
        self.root = sysfs_root(root)
        self.links = parse_links(self.root, interfaces) if interfaces else links_up_now(self.root)

    def __call__(self) -> list[CheckResult]:
        if not self.links:
            return [CheckResult(CHECK_NAME, "not_available", "no NIC link to watch")]
        states = {link.label: link_state(self.root, link) for link in self.links}
        down = [f"{label} ({what})" for label, (up, what) in states.items() if not up]
        data = {label: what for label, (_, what) in states.items()}
        if down:
            return [CheckResult(CHECK_NAME, "fail", "link down: " + "; ".join(down), data)]
        return [CheckResult(CHECK_NAME, "ok", f"{len(states)} link(s) up", data)]
