"""What a node brings to the barrier rendezvous: its infra group rank and its segment id.

- `infra_group_rank(env)`: `--ft-use-infra-group-rank` takes the node's rank from the
  scheduler, in this order: `SLURM_PROCID` (one launcher task per node, as Slurm starts
  it), `SLURM_NODEID`, `GROUP_RANK`. The first one set wins; missing or not a
  non-negative integer is a one-line error before anything starts. Duplicates are
  detected in the rendezvous (`launcher.rdzv.assignment`).
- `segment_id(env)`: the node's NVLink domain for `--ft-segment N`: the GPU fabric
  ClusterUUID from NVML (`nvmlDeviceGetGpuFabricInfoV`, else `nvmlDeviceGetGpuFabricInfo`;
  all GPUs of the node must agree), overridden by `RELAUNCH_SEGMENT_ID` or by the first
  line of the file named by `RELAUNCH_SEGMENT_ID_FILE` (CPU machines, tests).
- `uses_barrier(settings)`: whether the job rendezvous through `launcher.rdzv.barrier`.
- `check(settings)`: the config-time checks and values (`MIN % N == 0`, the two above,
  the numeric `--rdzv-conf` values the barrier rendezvous reads, the job's secret:
  `launcher.rdzv.auth.load_secret`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

INFRA_RANK_VARS = ("SLURM_PROCID", "SLURM_NODEID", "GROUP_RANK")
SEGMENT_ENV = "RELAUNCH_SEGMENT_ID"
SEGMENT_FILE_ENV = "RELAUNCH_SEGMENT_ID_FILE"


def infra_group_rank(env: Mapping[str, str]) -> tuple[int, str]:
    """(rank, variable it came from); ValueError with a one-line reason otherwise."""
    for name in INFRA_RANK_VARS:
        raw = env.get(name)
        if raw is None or raw.strip() == "":
            continue
        if not raw.strip().isdigit():
            raise ValueError(f"{name}={raw!r} is not a non-negative integer")
        return int(raw), name
    raise ValueError(f"none of {', '.join(INFRA_RANK_VARS)} is set on this node")


FABRIC_STATE_COMPLETED = 3  # NVML_GPU_FABRIC_STATE_COMPLETED: the GPU joined its fabric


def cluster_id_from(fabric: list[tuple[int, int, bytes]]) -> str:
    """The node's NVLink domain from each GPU's (state, status, clusterUuid bytes), as
    NVML reports them; ValueError when there is none or the GPUs disagree. Pure."""
    import uuid as _uuid

    ids = set()
    for state, status, raw in fabric:
        if state != FABRIC_STATE_COMPLETED or status != 0 or not any(raw):
            continue
        ids.add(str(_uuid.UUID(bytes=bytes(raw[:16]))))
    if not ids:
        raise ValueError("no GPU of this node reports a completed NVLink fabric ClusterUUID")
    if len(ids) > 1:
        raise ValueError(f"this node's GPUs report different ClusterUUIDs: {sorted(ids)}")
    return ids.pop()


def _read_fabric() -> list[tuple[int, int, bytes]]:
    """(state, status, clusterUuid) of every GPU through NVML (pynvml, as
    launcher.health.nvml): `nvmlDeviceGetGpuFabricInfoV`, else the older call."""
    import ctypes

    import pynvml

    pynvml.nvmlInit()
    try:
        out = []
        for i in range(int(pynvml.nvmlDeviceGetCount())):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            if hasattr(pynvml, "nvmlDeviceGetGpuFabricInfoV"):
                info = pynvml.c_nvmlGpuFabricInfoV_t()
                pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
            else:
                info = pynvml.c_nvmlGpuFabricInfo_t()
                pynvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
            out.append((int(info.state), int(info.status), bytes(info.clusterUuid)))
        return out
    finally:
        pynvml.nvmlShutdown()


MAX_SEGMENT_ID = 128  # a ClusterUUID is 36 characters; every node re-reads every id per poll


def _checked_segment(value: str, source: str, where: str = "") -> tuple[str, str]:
    if len(value) > MAX_SEGMENT_ID or not value.isprintable():
        raise ValueError(
            f"{where or source}: the segment id must be at most {MAX_SEGMENT_ID} printable "
            "characters"
        )
    return value, source


def segment_id(env: Mapping[str, str]) -> tuple[str, str]:
    """(segment id, where it came from); ValueError with a one-line reason otherwise."""
    if env.get(SEGMENT_ENV, "").strip():
        return _checked_segment(env[SEGMENT_ENV].strip(), SEGMENT_ENV)
    path = env.get(SEGMENT_FILE_ENV, "").strip()
    if path:
        from relaunch.launcher.safe_read import read_small_text

        try:  # a regular file only, read without blocking and bounded (a FIFO would hang)
            text = read_small_text(path, limit=64 * 1024)
        except OSError as exc:
            raise ValueError(f"{SEGMENT_FILE_ENV}={path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise ValueError(f"{SEGMENT_FILE_ENV}={path}: not UTF-8 text") from None
        value = text.split("\n", 1)[0].strip()
        if not value:
            raise ValueError(f"{SEGMENT_FILE_ENV}={path}: the file's first line is empty")
        return _checked_segment(value, SEGMENT_FILE_ENV, f"{SEGMENT_FILE_ENV}={path}")
    try:
        fabric = _read_fabric()
    except Exception as exc:  # noqa: BLE001 - no driver, no pynvml, unsupported GPU
        raise ValueError(
            f"cannot read the NVLink ClusterUUID through NVML ({type(exc).__name__}: {exc}); "
            f"set {SEGMENT_ENV} or {SEGMENT_FILE_ENV}"
        ) from None
    try:
        return cluster_id_from(fabric), "nvml"
    except ValueError as exc:
        raise ValueError(f"{exc}; set {SEGMENT_ENV} or {SEGMENT_FILE_ENV}") from None


_CONF_NUMBERS = {  # --rdzv-conf keys the barrier rendezvous reads: (type, minimum)
    "last_call_timeout": (int, 0),
    "join_timeout": (int, 1),
    "keep_alive_interval": (float, 0.01),
    "keep_alive_max_attempt": (int, 1),
    "read_timeout": (int, 1),
}


_BOOLS = {"1", "true", "t", "yes", "y", "0", "false", "f", "no", "n"}  # torch's get_as_bool


def check_conf(conf: str) -> None:
    """The numeric `--rdzv-conf` values of the barrier rendezvous (finite, at least the
    minimum) and `is_host` (a boolean, as torch reads it); one-line reason otherwise."""
    for part in conf.split(","):
        key, _, value = part.partition("=")
        key = key.strip()
        if key == "is_host" and value.strip().lower() not in _BOOLS:
            raise ValueError(f"--rdzv-conf is_host={value!r}: not a boolean (true or false)")
        if key not in _CONF_NUMBERS:
            continue
        kind, low = _CONF_NUMBERS[key]
        try:
            number = kind(value.strip())
        except ValueError:
            raise ValueError(f"--rdzv-conf {key}={value!r}: not a number") from None
        if not math.isfinite(number):  # nan passes every comparison; inf never fires
            raise ValueError(f"--rdzv-conf {key}={value!r}: not a finite number")
        if number < low:
            raise ValueError(f"--rdzv-conf {key}={value!r}: must be >= {low}")


def uses_barrier(settings: Any) -> bool:
    """Whether the job rendezvous through `launcher.rdzv.barrier` (the default)."""
    return bool(settings.rdzv_backend == "c10d" and settings.ft_rdzv_impl == "barrier")


def check(settings: Any, env: Mapping[str, str] | None = None) -> None:
    """Config-time checks of the rendezvous options; fills `settings.infra_rank` and
    `settings.segment_id`. Raises ValueError (one line)."""
    env = os.environ if env is None else env
    s = settings
    s.infra_rank = None
    s.segment_id = None
    barrier = uses_barrier(s)
    if barrier and s.rdzv_conf:
        check_conf(s.rdzv_conf)
    if barrier:
        from relaunch.launcher.rdzv.auth import load_secret

        s.job_secret = load_secret(s.ft_job_secret_file or None, single_node=s.max_nodes == 1)[0]
        if s.job_secret is None and not s.ft_insecure_store:
            raise ValueError(
                "a multi-node job needs a job secret, the same on every node: "
                "--ft-job-secret-file PATH or RELAUNCH_JOB_SECRET (at least 16 bytes); "
                "--ft-insecure-store runs without one (trusted test networks only)"
            )
    if s.ft_segment is not None:
        if not barrier:
            raise ValueError("--ft-segment needs the barrier rendezvous (--rdzv-backend c10d)")
        if s.min_nodes % s.ft_segment:
            raise ValueError(
                f"--ft-segment {s.ft_segment}: the minimum node count {s.min_nodes} "
                f"(--nnodes) must be a multiple of the segment size"
            )
        try:
            s.segment_id = segment_id(env)[0]
        except ValueError as exc:
            raise ValueError(f"--ft-segment: {exc}") from None
    if s.ft_use_infra_group_rank:
        if not barrier:
            raise ValueError(
                "--ft-use-infra-group-rank needs the barrier rendezvous (--rdzv-backend c10d)"
            )
        try:
            s.infra_rank = infra_group_rank(env)[0]
        except ValueError as exc:
            raise ValueError(f"--ft-use-infra-group-rank: {exc}") from None
