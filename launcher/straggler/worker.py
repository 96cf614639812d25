"""Worker-side straggler timing: `with straggler.section("fwd"):` times named sections.

Stdlib only (imported by `relaunch.client`). Each rank times its named sections and, once
per report interval (`RELAUNCH_STRAGGLER_INTERVAL` seconds, set by `relaunch run`), sends
one summary datagram over the heartbeat socket: per section the count, median, minimum
and total duration in nanoseconds. The check for "interval over" happens when a section
ends, so there is no thread and no collective: the launcher gathers the ranks' summaries
(`launcher.straggler.scores`).

Timing: wall time (`time.perf_counter_ns`) on CPU. When the training script has imported
torch and CUDA is available and initialised, CUDA events time the same sections (what the
GPU spent between the section's entry and exit, on the current stream); the events are
read at report time, never inside the training step. The choice is made once per report
interval (`choose_timer`), so a script that initialises CUDA after its first sections
switches at the next interval. Without a launcher (no socket, no interval) a section is a
shared no-op context.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

ENV_INTERVAL = "RELAUNCH_STRAGGLER_INTERVAL"
MAX_SECTIONS = 64  # section names kept per report (the datagram stays small)
MAX_SAMPLES = 4096  # durations kept per section per report (a bounded median)

Send = Callable[..., None]
_now_ns = time.perf_counter_ns


def choose_timer(modules: Mapping[str, Any] | None = None) -> str:
    """`"cuda"` when torch is imported and CUDA is available and initialised, else `"cpu"`.

    Never imports torch: a script that does not use it pays nothing, and one that has not
    initialised CUDA yet is timed on the CPU until it has.
    """
    mods = sys.modules if modules is None else modules
    torch = mods.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    if cuda is None:
        return "cpu"
    try:
        if cuda.is_available() and cuda.is_initialized():
            return "cuda"
    except Exception:  # noqa: BLE001 - a broken or partial torch install: fall back to the wall clock
        return "cpu"
    return "cpu"


class _Null:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NULL = _Null()


class _CpuSection:
    """One per section name, reused (no allocation per entry); a stack of start times
    keeps nested or recursive entries of the same name correct."""

    __slots__ = ("_owner", "_name", "_starts")

    def __init__(self, owner: StragglerTimer, name: str) -> None:
        self._owner = owner
        self._name = name
        self._starts: list[int] = []

    def __enter__(self) -> None:
        self._starts.append(_now_ns())

    def __exit__(self, et: object, ev: object, tb: object) -> None:
        end = _now_ns()
        took = end - self._starts.pop()
        owner = self._owner
        samples = owner._durations.get(self._name)  # inlined: this is the hot path
        if samples is not None and len(samples) < MAX_SAMPLES:
            samples.append(took)
        else:
            owner._record_sample(self._name, took)
        if end >= owner._next_report:
            owner._due(end)


class _CudaSection:
    __slots__ = ("_owner", "_name", "_start")

    def __init__(self, owner: StragglerTimer, name: str) -> None:
        self._owner = owner
        self._name = name

    def __enter__(self) -> None:
        self._start = self._owner._cuda.Event(enable_timing=True)
        self._start.record()

    def __exit__(self, *exc: object) -> None:
        end = self._owner._cuda.Event(enable_timing=True)
        end.record()
        self._owner._pending.append((self._name, self._start, end))
        self._owner._maybe_report(time.perf_counter_ns())


def _median(values: list[int]) -> int:
    s = sorted(values)
    n = len(s)
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) // 2


class StragglerTimer:
    """Times named sections of one rank and sends a summary every `interval_s` seconds.

    `send(kind, **fields)` is `relaunch.client`'s datagram sender. `interval_s` None reads
    `RELAUNCH_STRAGGLER_INTERVAL`; 0 (or no launcher) turns timing off.
    """

    def __init__(
        self,
        send: Send,
        interval_s: float | None = None,
        modules: Mapping[str, Any] | None = None,
    ) -> None:
        if interval_s is None:
            try:
                interval_s = float(os.environ.get(ENV_INTERVAL, "0") or 0)
            except ValueError:
                interval_s = 0.0
        self._send = send
        self._modules = modules
        self.enabled = interval_s > 0
        self._interval_ns = int(interval_s * 1e9) if self.enabled else 0
        self._durations: dict[str, list[int]] = {}
        self._cpu: dict[str, _CpuSection] = {}  # reused section objects, per name
        self._pending: list[tuple[str, Any, Any]] = []  # CUDA events not yet read
        self._cuda: Any = None  # torch.cuda while the timer is "cuda"
        self.timer = self._choose() if self.enabled else "off"
        self._next_report = 0  # the first section ending starts the first interval
        self._started = False
        self.reports_sent = 0

    def section(self, name: str) -> Any:
        """A context manager that times the section `name` (a no-op when off)."""
        if not self.enabled:
            return _NULL
        if name.__class__ is not str:
            name = str(name)  # summaries are JSON: section names are strings
        if self.timer == "cuda":
            return _CudaSection(self, name)
        sec = self._cpu.get(name)
        if sec is None:
            if len(self._cpu) >= MAX_SECTIONS:
                return _NULL  # names beyond the limit are not timed
            sec = self._cpu[name] = _CpuSection(self, name)
        return sec

    # ------------------------------------------------------------------ internals
    def _choose(self) -> str:
        timer = choose_timer(self._modules)
        mods = sys.modules if self._modules is None else self._modules
        self._cuda = mods["torch"].cuda if timer == "cuda" else None
        return timer

    def _maybe_report(self, now_ns: int) -> None:
        if now_ns >= self._next_report:
            self._due(now_ns)

    def _due(self, now_ns: int) -> None:
        if self._started:
            self.report(now_ns)
        else:  # intervals count from the first section, not from the (slow) import
            self._started = True
            self._next_report = now_ns + self._interval_ns

    def _read_cuda(self) -> None:
        pending, self._pending = self._pending, []
        if not pending:
            return
        try:
            pending[-1][2].synchronize()  # events complete in stream order
            for name, start, end in pending:
                ns = int(start.elapsed_time(end) * 1e6)  # elapsed_time is in ms
                self._record_sample(name, ns)
        except Exception:  # noqa: BLE001 - a CUDA error here is the training step's to report, not ours
            return

    def _record_sample(self, name: str, ns: int) -> None:
        samples = self._durations.get(name)
        if samples is None:
            if len(self._durations) >= MAX_SECTIONS:
                return
            samples = self._durations[name] = []
        if len(samples) < MAX_SAMPLES:
            samples.append(ns)

    def summary(self) -> dict[str, list[int]]:
        """{section: [count, median_ns, min_ns, total_ns]} of the interval so far."""
        return {
            name: [len(v), _median(v), min(v), sum(v)] for name, v in self._durations.items() if v
        }

    def report(self, now_ns: int | None = None) -> bool:
        """Send the interval's summary now (True when one was sent) and start a new one."""
        now_ns = time.perf_counter_ns() if now_ns is None else now_ns
        used = self.timer
        if used == "cuda":
            self._read_cuda()
        sec = self.summary()
        self._durations = {}
        self._next_report = now_ns + self._interval_ns
        self.timer = self._choose()
        if not sec:
            return False
        self.reports_sent += 1
        self._send("strag", n=self.reports_sent, sec=sec, tm=used)
        return True
