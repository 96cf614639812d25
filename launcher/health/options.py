"""Checks of the run-time health, exclusion-file and NUMA options at startup.

Each bad value raises ValueError with a one-line reason naming the flag; `launcher.config`
turns it into a usage error (exit 2) before anything starts.
"""

from __future__ import annotations

import os
from typing import Any

PSEUDO_FS = ("/proc", "/sys", "/dev")  # never the storage a job writes to


def check_options(s: Any) -> None:
    from relaunch.launcher.health.monitor import parse_groups

    try:
        parse_groups(s.ft_node_health_check_groups)
    except ValueError as exc:
        raise ValueError(f"--ft-node-health-check-groups: {exc}") from None
    if s.ft_storage_healthcheck_timeout <= 0:
        raise ValueError("--ft-storage-healthcheck-timeout: must be > 0 seconds")
    storage = s.ft_storage_healthcheck_path
    if storage and os.path.lexists(storage) and not os.path.isdir(storage):
        # a missing directory is a node problem (a mount missing here: exit 4 at the first
        # round); something that is not a directory (a file, a FIFO) is a wrong path
        raise ValueError(f"--ft-storage-healthcheck-path {storage}: not a directory")
    if storage:
        real = os.path.realpath(storage)
        if any(real == top or real.startswith(top + "/") for top in PSEUDO_FS):
            raise ValueError(
                f"--ft-storage-healthcheck-path {storage}: resolves to {real}, a kernel "
                "pseudo filesystem, not storage"
            )
    names = [n for n in s.ft_nic_interfaces.split(",") if n.strip()]
    if names:
        from relaunch.launcher.health.nic import parse_links
        from relaunch.launcher.sysfs import sysfs_root

        try:
            parse_links(sysfs_root(), names)
        except ValueError as exc:
            raise ValueError(f"--ft-nic-interfaces: {exc}") from None
    node = s.ft_node_id
    if node and (
        "/" in node or not node.isprintable() or any(c.isspace() for c in node) or len(node) > 255
    ):  # it names files (node_health/<node>.*.json) and console lines
        raise ValueError(
            f"--ft-node-id {node!r}: must be a non-blank name without '/', blanks or control "
            "characters (at most 255)"
        )
    if s.numa_binding:
        from relaunch.launcher.numa import NumaError, gpus_visible, numa_nodes

        if not gpus_visible():
            if s.run_path:
                raise ValueError(
                    f"--numa-binding {s.numa_binding}: without GPUs the binding needs a "
                    "command entrypoint (not --run-path)"
                )
            try:
                numa_nodes()
            except NumaError as exc:
                raise ValueError(f"--numa-binding {s.numa_binding}: {exc}") from None
