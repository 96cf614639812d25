"""Checks of the run-time health, exclusion-file and NUMA options at startup.

Each bad value raises ValueError with a one-line reason naming the flag; `launcher.config`
turns it into a usage error (exit 2) before anything starts.
"""

from __future__ import annotations

from typing import Any


def check_options(s: Any) -> None:
    from launcher.health.monitor import parse_groups

    try:
        parse_groups(s.ft_node_health_check_groups)
    except ValueError as exc:
        raise ValueError(f"--ft-node-health-check-groups: {exc}") from None
    if s.ft_storage_healthcheck_timeout <= 0:
        raise ValueError("--ft-storage-healthcheck-timeout: must be > 0 seconds")
    names = [n for n in s.ft_nic_interfaces.split(",") if n.strip()]
    if names:
        from launcher.health.nic import parse_links
        from launcher.sysfs import sysfs_root

        try:
            parse_links(sysfs_root(), names)
        except ValueError as exc:
            raise ValueError(f"--ft-nic-interfaces: {exc}") from None
    if s.ft_node_id and ("/" in s.ft_node_id or not s.ft_node_id.strip()):
        raise ValueError(f"--ft-node-id {s.ft_node_id!r}: must be a non-blank name without '/'")
    if s.numa_binding:
        from launcher.numa import NumaError, gpus_visible, numa_nodes

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
