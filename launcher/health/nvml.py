"""GPU health through NVML (pynvml): collect a snapshot per GPU, then judge it.

Checks per GPU: NVML reachable, pending page retirement / remapped-row failure,
uncorrectable ECC errors (volatile), critical Xid events seen during the sampling window,
NVLink link state (a GPU with fewer active links than its peers is degraded) and NVLink
error-counter growth over the window (persistent growth fails, one transient change is
ignored; see `growth.py`).

Collection (`collect_snapshots`) is the only code that talks to NVML; judging
(`evaluate_snapshots`) is a pure function of the collected data. On a machine without the
NVIDIA driver or without GPUs every entry point reports `not_available` and never fails.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from relaunch.launcher.health.growth import growth_by_key, persistent_keys
from relaunch.launcher.health.report import CheckResult, Status

log = logging.getLogger(__name__)

XID_TABLE_PATH = Path(__file__).with_name("xid_codes.json")

NVLINK_COUNTERS: dict[str, str] = {
    "replay": "NVML_NVLINK_ERROR_DL_REPLAY",
    "recovery": "NVML_NVLINK_ERROR_DL_RECOVERY",
    "crc_flit": "NVML_NVLINK_ERROR_DL_CRC_FLIT",
    "crc_data": "NVML_NVLINK_ERROR_DL_CRC_DATA",
}

# NVML init errors that mean "there is no NVIDIA GPU stack here" rather than "broken".
_NOT_AVAILABLE_ERRORS = (
    "NVMLError_LibraryNotFound",
    "NVMLError_DriverNotLoaded",
    "NVMLError_NoPermission",
    "NVMLError_FunctionNotFound",
    "NVMLError_NotSupported",
)


@dataclass
class GpuSnapshot:
    """Everything read from NVML about one GPU during one preflight."""

    index: int
    uuid: str = ""
    name: str = ""
    lost: bool = False
    retired_pages_pending: bool | None = None
    retired_pages: dict[str, int] = field(default_factory=dict)
    remapped_rows: dict[str, int | bool] | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    nvlink_active: dict[int, bool] = field(default_factory=dict)
    nvlink_samples: list[dict[str, int | None]] = field(default_factory=list)
    xids: list[int] = field(default_factory=list)
    xid_supported: bool | None = None
    read_errors: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NvmlOptions:
    """Knobs of the GPU check. window_s=0 or samples<2 skips the counter-growth check."""

    window_s: float = 1.0
    samples: int = 3
    min_growing_intervals: int = 2
    min_active_nvlinks: int | None = None  # None: compare with the node's best GPU
    nvlink_peer_check: bool = True  # False: only min_active_nvlinks (if set) can fail a GPU


@lru_cache(maxsize=1)
def load_xid_table() -> dict[int, dict[str, Any]]:
    """The Xid code table (data file `xid_codes.json`)."""
    raw = json.loads(XID_TABLE_PATH.read_text(encoding="utf-8"))
    return {int(code): dict(entry) for code, entry in raw["codes"].items()}


def _import_pynvml() -> Any:
    import pynvml  # nvidia-ml-py; imported lazily so a broken install only disables checks

    return pynvml


def _is_not_available(exc: BaseException) -> bool:
    return any(type(exc).__name__ == name for name in _NOT_AVAILABLE_ERRORS) or (
        type(exc).__name__ in ("ImportError", "ModuleNotFoundError", "OSError")
    )


def nvml_probe() -> CheckResult:
    """Can NVML be initialised here? `not_available` without driver/library; never `fail`."""
    try:
        nv = _import_pynvml()
        nv.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - any NVML/import problem fails open
        status: Status = "not_available" if _is_not_available(exc) else "error"
        return CheckResult("nvml", status, f"NVML not available: {exc}", {"error": str(exc)})
    try:
        count = int(nv.nvmlDeviceGetCount())
        driver = nv.nvmlSystemGetDriverVersion()
    except Exception as exc:  # noqa: BLE001
        return CheckResult("nvml", "error", f"NVML initialised but unusable: {exc}")
    finally:
        _shutdown(nv)
    driver = driver.decode() if isinstance(driver, bytes) else str(driver)
    if count == 0:
        return CheckResult(
            "nvml", "not_available", "NVML reachable but no GPUs", {"driver": driver}
        )
    return CheckResult(
        "nvml", "ok", f"NVML reachable, {count} GPU(s)", {"gpus": count, "driver": driver}
    )


def _shutdown(nv: Any) -> None:
    try:
        nv.nvmlShutdown()
    except Exception:  # logged with its traceback: a failed shutdown changes nothing
        log.debug("nvmlShutdown failed", exc_info=True)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _read(snap: GpuSnapshot, what: str, fn: Any, *args: Any) -> Any:
    """Call one NVML getter; NotSupported -> None, other errors recorded and -> None."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001
        name = type(exc).__name__
        if name == "NVMLError_GpuIsLost":
            snap.lost = True
        if name not in ("NVMLError_NotSupported", "NVMLError_InvalidArgument"):
            snap.read_errors[what] = f"{name}: {exc}"
        return None


def _read_static(nv: Any, handle: Any, snap: GpuSnapshot) -> None:
    snap.uuid = _text(_read(snap, "uuid", nv.nvmlDeviceGetUUID, handle) or "")
    snap.name = _text(_read(snap, "name", nv.nvmlDeviceGetName, handle) or "")
    pending = _read(
        snap, "retired_pages_pending", nv.nvmlDeviceGetRetiredPagesPendingStatus, handle
    )
    if pending is not None:
        snap.retired_pages_pending = int(pending) == int(nv.NVML_FEATURE_ENABLED)
    for label, cause in (
        ("double_bit_ecc", nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
        ("multiple_single_bit_ecc", nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
    ):
        pages = _read(snap, f"retired_pages.{label}", nv.nvmlDeviceGetRetiredPages, handle, cause)
        if pages is not None:
            snap.retired_pages[label] = len(pages)
    rows = _read(snap, "remapped_rows", nv.nvmlDeviceGetRemappedRows, handle)
    if rows is not None:
        corr, unc, is_pending, failure = (int(v) for v in rows)
        snap.remapped_rows = {
            "correctable": corr,
            "uncorrectable": unc,
            "pending": bool(is_pending),
            "failure": bool(failure),
        }
    unc_type = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    vol = _read(
        snap, "ecc.volatile", nv.nvmlDeviceGetTotalEccErrors, handle, unc_type, nv.NVML_VOLATILE_ECC
    )
    agg = _read(
        snap,
        "ecc.aggregate",
        nv.nvmlDeviceGetTotalEccErrors,
        handle,
        unc_type,
        nv.NVML_AGGREGATE_ECC,
    )
    snap.ecc_uncorrected_volatile = None if vol is None else int(vol)
    snap.ecc_uncorrected_aggregate = None if agg is None else int(agg)
    for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
        state = _read(snap, f"nvlink{link}.state", nv.nvmlDeviceGetNvLinkState, handle, link)
        if state is not None:
            snap.nvlink_active[link] = int(state) == int(nv.NVML_FEATURE_ENABLED)


def _read_counters(nv: Any, handle: Any, snap: GpuSnapshot) -> dict[str, int | None]:
    sample: dict[str, int | None] = {}
    for link in snap.nvlink_active:
        for label, const in NVLINK_COUNTERS.items():
            counter = getattr(nv, const, None)
            if counter is None:
                continue
            value = _read(
                snap,
                f"nvlink{link}.{label}",
                nv.nvmlDeviceGetNvLinkErrorCounter,
                handle,
                link,
                counter,
            )
            if value is not None:
                sample[f"link{link}.{label}"] = int(value)
    return sample


def _wait_xids(nv: Any, event_set: Any, seconds: float, by_handle: dict[int, GpuSnapshot]) -> None:
    """Wait up to `seconds` for critical Xid events and attach them to their GPU."""
    deadline = time.monotonic() + max(0.0, seconds)
    while True:
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            return
        try:
            data = nv.nvmlEventSetWait(event_set, left_ms)
        except Exception as exc:  # noqa: BLE001 - Timeout is the normal "no event" outcome
            if type(exc).__name__ != "NVMLError_Timeout":
                log.debug("nvmlEventSetWait failed: %s", exc)
            time.sleep(max(0.0, deadline - time.monotonic()))
            return
        try:
            index = int(nv.nvmlDeviceGetIndex(data.device))
        except Exception:  # noqa: BLE001
            index = -1
        target = by_handle.get(index)
        if target is not None:
            target.xids.append(int(data.eventData))


def collect_snapshots(options: NvmlOptions = NvmlOptions()) -> list[GpuSnapshot] | CheckResult:
    """Read every GPU through NVML, sampling NVLink counters and Xids over the window.

    Returns a `CheckResult` (not_available / error) when NVML cannot be used at all.
    """
    try:
        nv = _import_pynvml()
        nv.nvmlInit()
    except Exception as exc:  # noqa: BLE001
        status: Status = "not_available" if _is_not_available(exc) else "error"
        return CheckResult("nvml", status, f"NVML not available: {exc}", {"error": str(exc)})
    try:
        count = int(nv.nvmlDeviceGetCount())
        if count == 0:
            return CheckResult("nvml", "not_available", "NVML reachable but no GPUs")
        snaps: list[GpuSnapshot] = []
        handles: list[Any] = []
        for i in range(count):
            snap = GpuSnapshot(index=i)
            handle = _read(snap, "handle", nv.nvmlDeviceGetHandleByIndex, i)
            snaps.append(snap)
            handles.append(handle)
            if handle is None:
                snap.lost = True
                continue
            _read_static(nv, handle, snap)
        event_set = None
        try:
            event_set = nv.nvmlEventSetCreate()
        except Exception as exc:  # noqa: BLE001
            log.debug("no NVML event set: %s", exc)
        for snap, handle in zip(snaps, handles, strict=True):
            if handle is None or event_set is None:
                continue
            try:
                nv.nvmlDeviceRegisterEvents(handle, nv.nvmlEventTypeXidCriticalError, event_set)
                snap.xid_supported = True
            except Exception as exc:  # noqa: BLE001
                snap.xid_supported = False
                log.debug("GPU %d: no Xid events: %s", snap.index, exc)
        by_index = {s.index: s for s in snaps}
        n = max(1, options.samples)
        interval = options.window_s / (n - 1) if n > 1 else 0.0
        for k in range(n):
            for snap, handle in zip(snaps, handles, strict=True):
                if handle is not None and not snap.lost:
                    snap.nvlink_samples.append(_read_counters(nv, handle, snap))
            if k < n - 1:
                if event_set is not None:
                    _wait_xids(nv, event_set, interval, by_index)
                else:
                    time.sleep(interval)
        if event_set is not None:
            try:
                nv.nvmlEventSetFree(event_set)
            except Exception:  # logged with its traceback: a leaked event set is harmless
                log.debug("nvmlEventSetFree failed", exc_info=True)
        return snaps
    except Exception as exc:  # noqa: BLE001 - an NVML failure mid-way fails open
        log.warning("GPU health collection failed: %s", exc)
        return CheckResult("nvml", "error", f"NVML failed during collection: {exc}")
    finally:
        _shutdown(nv)


def _gpu_label(snap: GpuSnapshot) -> str:
    return f"gpu{snap.index}"


def evaluate_snapshots(
    snaps: list[GpuSnapshot], options: NvmlOptions = NvmlOptions()
) -> list[CheckResult]:
    """Judge collected GPU snapshots. Pure: same input, same checks."""
    results: list[CheckResult] = [CheckResult("nvml", "ok", f"NVML reachable, {len(snaps)} GPU(s)")]
    xid_table = load_xid_table()
    peer_best = max((sum(s.nvlink_active.values()) for s in snaps), default=0)
    if options.min_active_nvlinks is not None:
        expected_links = options.min_active_nvlinks
    else:
        expected_links = peer_best if options.nvlink_peer_check else 0
    for snap in snaps:
        g = _gpu_label(snap)
        ident = {"uuid": snap.uuid, "name": snap.name}
        if snap.lost:
            results.append(
                CheckResult(f"{g}.reachable", "fail", "GPU is lost or unreachable", ident)
            )
            continue
        results.append(CheckResult(f"{g}.reachable", "ok", "", ident))

        # Retired pages (pre-Ampere) / remapped rows (Ampere and later).
        if snap.retired_pages_pending:
            results.append(
                CheckResult(
                    f"{g}.retired_pages",
                    "fail",
                    "page retirement pending: GPU reset required",
                    dict(snap.retired_pages),
                )
            )
        elif snap.retired_pages_pending is not None or snap.retired_pages:
            results.append(CheckResult(f"{g}.retired_pages", "ok", "", dict(snap.retired_pages)))
        rows = snap.remapped_rows
        if rows is not None:
            if rows["failure"]:
                results.append(
                    CheckResult(f"{g}.remapped_rows", "fail", "row remapping failed", rows)
                )
            elif rows["pending"]:
                results.append(
                    CheckResult(
                        f"{g}.remapped_rows",
                        "fail",
                        "row remapping pending: GPU reset required",
                        rows,
                    )
                )
            else:
                results.append(CheckResult(f"{g}.remapped_rows", "ok", "", rows))
        if snap.retired_pages_pending is None and not snap.retired_pages and rows is None:
            results.append(
                CheckResult(f"{g}.memory_repair", "not_available", "not supported by this GPU")
            )

        # Uncorrectable ECC since the last driver load.
        ecc_data = {
            "volatile": snap.ecc_uncorrected_volatile,
            "aggregate": snap.ecc_uncorrected_aggregate,
        }
        if snap.ecc_uncorrected_volatile is None:
            results.append(
                CheckResult(f"{g}.ecc", "not_available", "ECC not supported or disabled", ecc_data)
            )
        elif snap.ecc_uncorrected_volatile > 0:
            results.append(
                CheckResult(
                    f"{g}.ecc",
                    "fail",
                    f"{snap.ecc_uncorrected_volatile} uncorrectable ECC error(s) since driver load",
                    ecc_data,
                )
            )
        else:
            results.append(CheckResult(f"{g}.ecc", "ok", "", ecc_data))

        results.append(_evaluate_xids(g, snap, xid_table))
        results.extend(_evaluate_nvlink(g, snap, expected_links, options))
        if snap.read_errors:
            results.append(
                CheckResult(
                    f"{g}.nvml_reads",
                    "error",
                    f"{len(snap.read_errors)} NVML read(s) failed",
                    dict(snap.read_errors),
                )
            )
    return results


def _evaluate_xids(g: str, snap: GpuSnapshot, table: dict[int, dict[str, Any]]) -> CheckResult:
    if snap.xid_supported is False or snap.xid_supported is None:
        return CheckResult(f"{g}.xid", "not_available", "Xid events not supported")
    events = [
        {
            "xid": x,
            "name": table.get(x, {}).get("name", "unknown"),
            "node_unhealthy": bool(table.get(x, {}).get("node_unhealthy", False)),
        }
        for x in snap.xids
    ]
    bad = [e for e in events if e["node_unhealthy"]]
    if bad:
        text = ", ".join(f"Xid {e['xid']} ({e['name']})" for e in bad)
        return CheckResult(
            f"{g}.xid", "fail", f"critical Xid during window: {text}", {"events": events}
        )
    detail = f"{len(events)} non-critical Xid event(s)" if events else ""
    return CheckResult(f"{g}.xid", "ok", detail, {"events": events})


def _evaluate_nvlink(
    g: str, snap: GpuSnapshot, expected_links: int, options: NvmlOptions
) -> list[CheckResult]:
    out: list[CheckResult] = []
    if not snap.nvlink_active:
        return [CheckResult(f"{g}.nvlink", "not_available", "no NVLink on this GPU")]
    active = sorted(link for link, up in snap.nvlink_active.items() if up)
    inactive = sorted(link for link, up in snap.nvlink_active.items() if not up)
    data = {"active": active, "inactive": inactive, "expected_active": expected_links}
    if len(active) < expected_links:
        out.append(
            CheckResult(
                f"{g}.nvlink",
                "fail",
                f"{len(active)} NVLink(s) active, expected {expected_links} (down: {inactive})",
                data,
            )
        )
    else:
        out.append(CheckResult(f"{g}.nvlink", "ok", "", data))
    samples = snap.nvlink_samples
    if len(samples) < 2 or not any(samples):
        out.append(
            CheckResult(f"{g}.nvlink_errors", "not_available", "NVLink error counters not sampled")
        )
        return out
    verdicts = growth_by_key(samples, min_growing_intervals=options.min_growing_intervals)
    growing = persistent_keys(verdicts)
    vdata = {
        "growing": growing,
        "samples": len(samples),
        "window_s": options.window_s,
        "counters": {k: v.to_dict() for k, v in verdicts.items() if v.total_growth},
    }
    if growing:
        out.append(
            CheckResult(
                f"{g}.nvlink_errors",
                "fail",
                f"NVLink error counters grew persistently: {', '.join(growing)}",
                vdata,
            )
        )
    else:
        out.append(CheckResult(f"{g}.nvlink_errors", "ok", "", vdata))
    return out


def gpu_checks(options: NvmlOptions = NvmlOptions()) -> list[CheckResult]:
    """Run all GPU checks; `[nvml not_available]` on a machine without GPU or driver."""
    collected = collect_snapshots(options)
    if isinstance(collected, CheckResult):
        return [collected]
    return evaluate_snapshots(collected, options)
