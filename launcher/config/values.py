"""Value types of `relaunch run`'s options: each converts the text of a command-line
value or a YAML value and raises ValueError with a one-line reason (the CLI and the YAML
loader put the option's name in front). Also `ConfigError`, the error of a bad setting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from relaunch.attribution.core.policy_config import MAX_VALUE, bounded_int


class ConfigError(ValueError):
    """A bad option value or config file; the CLI turns it into a one-line error."""


MAX_SECONDS = 1e7  # about 115 days; beyond it a duration is a mistake (and overflows waits)
MAX_COUNT = 1_000_000  # restarts, node ranks, ...: beyond it a count is a mistake
MAX_NPROC = 4096  # workers on one node
MAX_NODES = 100_000
MAX_DIGITS = 30  # a longer number is refused before int() spends time on it


def _int(text: str, lo: int = 0, hi: int = MAX_COUNT) -> int:
    raw = str(text).strip()
    if len(raw.lstrip("+-")) > MAX_DIGITS:
        raise ValueError(f"must be >= {lo}" if raw.startswith("-") else f"must be at most {hi}")
    return int(raw)


def positive_float(text: str) -> float:
    """A duration in seconds, 0 to MAX_SECONDS (nan and inf are refused: nan compares false
    with everything and would switch a timeout or an interval off silently)."""
    value = float(text)
    if value < 0:
        raise ValueError("must be >= 0")
    if not math.isfinite(value) or value > MAX_SECONDS:
        raise ValueError(f"must be a finite number of seconds, at most {MAX_SECONDS:g}")
    return value


def non_negative_int(text: str) -> int:
    value = _int(text, 0)
    if value < 0:
        raise ValueError("must be >= 0")
    if value > MAX_COUNT:
        raise ValueError(f"must be at most {MAX_COUNT}")
    return value


def positive_int(text: str) -> int:
    value = _int(text, 1)
    if value < 1:
        raise ValueError("must be >= 1")
    if value > MAX_COUNT:
        raise ValueError(f"must be at most {MAX_COUNT}")
    return value


def nproc_spec(text: str) -> int:
    """torchrun's `--nproc-per-node`: N, or `cpu`, `gpu`, `auto` (GPUs if any, else CPUs)."""
    word = str(text).strip().lower()
    if word not in ("cpu", "gpu", "auto"):
        try:
            value = positive_int(word)
        except ValueError:
            value = 0
        if not 1 <= value <= MAX_NPROC:
            raise ValueError(f"must be a number from 1 to {MAX_NPROC}, cpu, gpu or auto")
        return value
    import os

    gpus = 0
    if word != "cpu":
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if word == "gpu" and gpus == 0:
        raise ValueError("gpu: no CUDA device is available")
    return gpus or os.cpu_count() or 1


def nnodes_spec(text: str) -> str:
    parts = str(text).split(":")
    if len(parts) not in (1, 2) or not all(p.strip().isdigit() for p in parts):
        raise ValueError("must be N or MIN:MAX")
    if any(len(p.strip()) > MAX_DIGITS for p in parts):
        raise ValueError(f"must be at most {MAX_NODES} nodes")
    lo, hi = int(parts[0]), int(parts[-1])
    if not 0 < lo <= hi:
        raise ValueError("must satisfy 0 < MIN <= MAX")
    if hi > MAX_NODES:
        raise ValueError(f"must be at most {MAX_NODES} nodes")
    return str(text)


def endpoint_spec(text: str) -> str:
    text = str(text).strip()
    if text in ("embedded", "off") or text.startswith(("http://", "https://")):
        return text
    if text.startswith("unix://") and len(text) > len("unix://"):
        return text
    raise ValueError("must be embedded, off, http://HOST:PORT or unix:///PATH")


def boolean(text: str) -> bool:
    low = str(text).strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def section_timeouts(text: str) -> dict[str, float]:
    """`setup:900,step:120` -> {"setup": 900.0, "step": 120.0}."""
    out: dict[str, float] = {}
    for part in str(text).split(","):
        if not part.strip():
            continue
        name, sep, value = part.partition(":")
        if not sep or not name.strip():
            raise ValueError("expected NAME:SECONDS[,NAME:SECONDS...]")
        if value.strip().lower() in ("none", "null", ""):
            continue  # NVRx: no timeout for this section
        out[name.strip()] = positive_float(value)
    return out


def std_spec(text: str) -> str:
    from relaunch.launcher.console import parse_std

    parse_std(text)
    return str(text).strip()


def ranks_filter_spec(text: str) -> str:
    from relaunch.launcher.console import parse_ranks_filter

    return ",".join(map(str, sorted(parse_ranks_filter(text))))


def prefix_template(text: str) -> str:
    from relaunch.launcher.console import check_template

    return check_template(str(text))


def port_number(text: str) -> int | None:
    if str(text).strip().lower() in ("", "none"):
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError("must be a port 0-65535") from None
    if not 0 <= value <= 65535:
        raise ValueError("must be a port 0-65535")
    return value


def rdzv_impl(text: str) -> str:
    value = str(text).strip()
    if value == "legacy":
        raise ValueError(
            "the legacy rendezvous implementation was removed; barrier is the only implementation"
        )
    if value not in ("barrier", "c10d"):
        raise ValueError("must be barrier (default) or c10d (torch's dynamic rendezvous)")
    return value


def segment_size(text: str) -> int | None:
    """`--ft-segment N`: nodes per NVLink segment (>= 1); none/empty: simple hot spares."""
    if str(text).strip().lower() in ("", "none"):
        return None
    return positive_int(text)


def restart_policy(text: str) -> str:
    value = str(text).strip()
    if value != "any-failed":
        raise ValueError("only any-failed is supported (restart when any worker group fails)")
    return value


def nvrx_no_progress_cycles(text: str) -> int:
    """NVRx's `max_no_progress_cycles`: 0 or -1 disable the ceiling (-> the maximum)."""
    if str(text).strip() in ("0", "-1"):
        return MAX_VALUE
    return bounded_int(text)


def rdzv_conf_numbers(conf: Mapping[str, object]) -> None:
    """Every number in `--rdzv-conf` (timeouts, intervals, ranks) finite and at most
    MAX_SECONDS: torch turns them into timedeltas, which overflow past that."""
    for key, value in conf.items():
        text = str(value).strip()
        try:
            number = float(text) if len(text) <= 40 else math.inf
        except ValueError:
            continue  # not a number: torch checks the rest
        if not math.isfinite(number) or abs(number) > MAX_SECONDS:
            raise ValueError(f"{key}={text[:40]} must be a finite number at most {MAX_SECONDS:g}")


def optional_float(text: str) -> float | None:
    """A positive number, or none/null/off/0/'' for "not used" (NVRx's 'null'|'none'|'')."""
    if str(text).strip().lower() in ("none", "null", "off", "0", ""):
        return None
    return positive_float(text)
