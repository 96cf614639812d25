"""`--numa-binding node|socket|exclusive|core-complex`: pin each worker's CPUs.

With GPUs visible, torch's own binding is used (`torch.numa.binding`, torchrun's values:
it binds local rank N to the CPUs near GPU N; a command entrypoint needs `numactl`).
Without GPUs (or without `numactl` for a command), relaunch binds from the NUMA topology in
`<sysfs>/devices/system/node/node*/cpulist`, round-robin by local rank:

- node: local rank r gets NUMA node r mod N (its CPUs the launcher may use);
- socket: every NUMA node of that node's socket (`physical_package_id`);
- exclusive: the ranks sharing a node split its CPUs into disjoint contiguous parts;
- core-complex: one last-level-cache group of that node (`cache/index*/shared_cpu_list`),
  the ranks sharing a node taking its groups in turn.

The plan (local rank -> CPU list) travels to the workers in `RELAUNCH_NUMA_PLAN`; each
worker command starts through `python -m launcher.numa_exec`, which sets its affinity with
`os.sched_setaffinity` and then execs the real command, so the workload's first
instruction already runs on its CPUs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from relaunch.launcher.sysfs import format_cpulist, parse_cpulist, read_text, sysfs_root

MODES = ("node", "socket", "exclusive", "core-complex")
ENV_PLAN = "RELAUNCH_NUMA_PLAN"


class NumaError(Exception):
    """The topology cannot be read or gives no CPU to bind to."""


def numa_nodes(root: Path | None = None) -> dict[int, set[int]]:
    """NUMA node -> its CPUs (nodes without CPUs left out)."""
    base = sysfs_root(root) / "devices" / "system" / "node"
    out: dict[int, set[int]] = {}
    try:
        names = [p.name for p in base.iterdir()]
    except OSError as exc:
        raise NumaError(f"no NUMA topology at {base}: {exc}") from None
    for name in names:
        m = re.fullmatch(r"node(\d+)", name)
        if not m:
            continue
        text = read_text(base / name / "cpulist")
        if text is None:
            continue
        try:
            cpus = parse_cpulist(text)
        except ValueError as exc:
            raise NumaError(f"{base / name / 'cpulist'}: {exc}") from None
        if cpus:
            out[int(m.group(1))] = cpus
    if not out:
        raise NumaError(f"no NUMA node with CPUs under {base}")
    return dict(sorted(out.items()))


def _cpu_file(root: Path, cpu: int, *parts: str) -> str | None:
    return read_text(root.joinpath("devices", "system", "cpu", f"cpu{cpu}", *parts))


def _socket_of(root: Path, cpus: set[int]) -> str | None:
    return _cpu_file(root, min(cpus), "topology", "physical_package_id")


def _llc_groups(root: Path, cpus: set[int]) -> list[set[int]]:
    """The node's CPUs grouped by their last-level cache; one group when unreadable."""
    groups: dict[str, set[int]] = {}
    for cpu in sorted(cpus):
        base = root / "devices" / "system" / "cpu" / f"cpu{cpu}" / "cache"
        best: tuple[int, str] | None = None
        try:
            entries = [p for p in base.iterdir() if re.fullmatch(r"index\d+", p.name)]
        except OSError:
            entries = []
        for entry in entries:
            if read_text(entry / "type") not in ("Unified", "Data"):
                continue
            level, shared = read_text(entry / "level"), read_text(entry / "shared_cpu_list")
            if level and level.isdigit() and shared and (best is None or int(level) > best[0]):
                best = (int(level), shared)
        key = best[1] if best else "all"
        groups.setdefault(key, set()).add(cpu)
    return sorted(groups.values(), key=min)


def plan_binding(
    mode: str, nproc: int, *, root: str | os.PathLike[str] | None = None,
    allowed: set[int] | None = None,
) -> dict[int, set[int]]:  # fmt: skip
    """Local rank -> CPUs for `nproc` workers. `allowed` (default: this process's
    affinity) trims each set; a set that would be empty keeps the node's CPUs."""
    if mode not in MODES:
        raise ValueError(f"unknown NUMA binding {mode!r}; expected one of {', '.join(MODES)}")
    base = sysfs_root(root)
    nodes = numa_nodes(base)
    if allowed is None:
        allowed = set(os.sched_getaffinity(0))
    ids = list(nodes)
    usable = {n: (nodes[n] & allowed) or nodes[n] for n in ids}
    plan: dict[int, set[int]] = {}
    for rank in range(nproc):
        node = ids[rank % len(ids)]
        sharers = [r for r in range(nproc) if ids[r % len(ids)] == node]
        turn = sharers.index(rank)
        cpus = sorted(usable[node])
        if mode == "node":
            plan[rank] = set(cpus)
        elif mode == "socket":
            sock = _socket_of(base, nodes[node])
            same = [n for n in ids if sock is not None and _socket_of(base, nodes[n]) == sock]
            plan[rank] = set().union(*(usable[n] for n in same)) if same else set(cpus)
        elif mode == "exclusive":  # contiguous parts; more ranks than CPUs: one CPU each
            part = cpus[turn * len(cpus) // len(sharers) : (turn + 1) * len(cpus) // len(sharers)]
            plan[rank] = set(part) or {cpus[turn % len(cpus)]}
        else:  # core-complex
            groups = [g & usable[node] or g for g in _llc_groups(base, nodes[node])]
            plan[rank] = groups[turn % len(groups)]
    return plan


def gpus_visible() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available() and torch.cuda.device_count() > 0)
    except Exception:  # noqa: BLE001 - no usable CUDA: the sysfs binding applies
        return False


def apply_numa_binding(spec: Any, mode: str, nproc: int) -> str:
    """Set up `spec` (an elastic WorkerSpec) for binding; returns the line to print.
    Raises NumaError when the sysfs topology is needed and unusable."""
    command = isinstance(spec.entrypoint, str)
    if gpus_visible() and (not command or shutil.which("numactl")):
        from torch.numa.binding import AffinityMode, NumaOptions

        spec.numa_options = NumaOptions(affinity_mode=AffinityMode(mode))
        return f"NUMA binding {mode}: torch's binding (local rank N -> CPUs near GPU N)"
    if not command:
        raise NumaError("--numa-binding without GPUs needs a command entrypoint (not --run-path)")
    plan = plan_binding(mode, nproc)
    os.environ[ENV_PLAN] = json.dumps({str(r): format_cpulist(c) for r, c in plan.items()})
    spec.args = ("-m", "relaunch.launcher.numa_exec", spec.entrypoint, *spec.args)
    spec.entrypoint = sys.executable
    shown = ", ".join(f"{r}->{format_cpulist(c)}" for r, c in plan.items())
    return f"NUMA binding {mode} from sysfs (local rank -> CPUs): {shown}"


def cpus_for_local_rank(environ: dict[str, str] | None = None) -> set[int]:
    """The CPUs `RELAUNCH_NUMA_PLAN` gives this worker's `LOCAL_RANK`."""
    env = os.environ if environ is None else environ
    plan = json.loads(env[ENV_PLAN])
    return parse_cpulist(plan[env.get("LOCAL_RANK", "0")])
