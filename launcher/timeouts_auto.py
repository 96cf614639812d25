"""Timeouts calculated from observed intervals (`--ft-calculate-timeouts`), as NVRx does.

The heartbeat monitor (`launcher.heartbeat.RankMonitor`) records what it sees into
`Observations`: the time from a rank's first message to its first heartbeat (initial),
the silence between two messages (heartbeat), each completed section's duration (per
name) and each completed stretch outside every section (out-of-section). Only completed
intervals count: a hang never measures itself.

`calculate` turns the observations into timeouts: the longest observed interval times the
safety factor (`--ft-safety-factor`, NVRx's `safety_factor`, default 5). A value is
calculated only once enough was observed (`MIN_OBSERVATIONS`); until then the explicit or
default value stays. Observations accumulate over the cycles of the job (a running
maximum), so a calculated timeout never shrinks.

`AutoTimeouts` is what the launcher holds: the job's observations, the timeouts each new
cycle uses, and their persistence in `<job-dir>/calculated_timeouts[.node<K>].json`, so a
re-run of the same job id starts from them. Pure logic and a JSON file; no torch.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relaunch.launcher.safe_read import loads_json, read_small_text

DEFAULT_SAFETY_FACTOR = 5.0  # NVRx's FaultToleranceConfig.safety_factor
# observations needed before a value replaces the explicit one (NVRx needs two heartbeats:
# one initial and one interval; relaunch wants a few intervals before trusting the maximum)
MIN_OBSERVATIONS = {"initial": 1, "heartbeat": 3, "section": 1, "out_of_section": 1}
STATE_VERSION = 1
# the longest interval a stored state may claim (a week); a larger or non-finite one in a
# tampered or corrupt file is dropped, so it cannot stretch a calculated timeout to never
MAX_INTERVAL_S = 7 * 24 * 3600.0


@dataclass
class Observed:
    """The longest of the intervals seen, and how many were seen."""

    max_s: float = 0.0
    count: int = 0

    def add(self, seconds: float) -> None:
        if not math.isfinite(seconds) or seconds < 0:
            return
        self.max_s = max(self.max_s, float(seconds))
        self.count += 1

    def merge(self, other: Observed) -> None:
        self.max_s = max(self.max_s, other.max_s)
        self.count += other.count

    def to_json(self) -> list[float | int]:
        return [round(self.max_s, 6), self.count]

    @staticmethod
    def from_json(value: Any) -> Observed:
        try:
            max_s, count = float(value[0]), int(value[1])
        except (TypeError, ValueError, IndexError, KeyError):
            return Observed()
        if not math.isfinite(max_s) or not 0 <= max_s <= MAX_INTERVAL_S or count < 0:
            return Observed()  # a tampered value must not stretch a timeout past any hang
        return Observed(max_s, count)


@dataclass
class Observations:
    """What the monitor observed (thread-safe enough: the receiver thread is the only writer
    while a cycle runs; the launcher reads between cycles)."""

    initial: Observed = field(default_factory=Observed)
    heartbeat: Observed = field(default_factory=Observed)
    out_of_section: Observed = field(default_factory=Observed)
    sections: dict[str, Observed] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def section(self, name: str) -> Observed:
        with self._lock:
            return self.sections.setdefault(str(name), Observed())

    def merge(self, other: Observations) -> None:
        self.initial.merge(other.initial)
        self.heartbeat.merge(other.heartbeat)
        self.out_of_section.merge(other.out_of_section)
        for name, obs in list(other.sections.items()):
            self.section(name).merge(obs)

    def to_json(self) -> dict[str, Any]:
        return {
            "initial": self.initial.to_json(),
            "heartbeat": self.heartbeat.to_json(),
            "out_of_section": self.out_of_section.to_json(),
            "sections": {k: v.to_json() for k, v in sorted(self.sections.items())},
        }

    @staticmethod
    def from_json(data: Any) -> Observations:
        obs = Observations()
        if not isinstance(data, Mapping):
            return obs
        obs.initial = Observed.from_json(data.get("initial"))
        obs.heartbeat = Observed.from_json(data.get("heartbeat"))
        obs.out_of_section = Observed.from_json(data.get("out_of_section"))
        sections = data.get("sections")
        if isinstance(sections, Mapping):
            for name, value in sections.items():
                if isinstance(name, str) and name:
                    obs.sections[name[:200]] = Observed.from_json(value)
        return obs


@dataclass(frozen=True)
class Calculated:
    """Calculated timeouts (None: not enough observations, the explicit value stays)."""

    initial: float | None = None
    heartbeat: float | None = None
    out_of_section: float | None = None
    sections: dict[str, float] = field(default_factory=dict)

    def names(self) -> frozenset[str]:
        """The monitor's names of the calculated values (`section:NAME` for sections)."""
        out = {n for n in ("initial", "heartbeat", "out_of_section") if getattr(self, n)}
        out.update(f"section:{k}" for k in self.sections)
        return frozenset(out)

    def describe(self) -> str:
        parts = []
        if self.heartbeat is not None:
            parts.append(f"heartbeat {self.heartbeat:.3g} s")
        if self.initial is not None:
            parts.append(f"initial {self.initial:.3g} s")
        for name, value in sorted(self.sections.items()):
            parts.append(f"section {name!r} {value:.3g} s")
        if self.out_of_section is not None:
            parts.append(f"out-of-section {self.out_of_section:.3g} s")
        return ", ".join(parts) or "none yet"


def _round(value: float) -> float:
    return float(f"{value:.3g}") if value > 0 else 0.0


def calculate(obs: Observations, safety_factor: float) -> Calculated:
    """Safety factor times the longest observed interval, where enough was observed."""

    def one(o: Observed, kind: str) -> float | None:
        if o.count < MIN_OBSERVATIONS[kind] or o.max_s <= 0:
            return None
        return _round(o.max_s * safety_factor)

    sections = {}
    for name, o in sorted(obs.sections.items()):
        value = one(o, "section")
        if value is not None:
            sections[name] = value
    return Calculated(
        initial=one(obs.initial, "initial"),
        heartbeat=one(obs.heartbeat, "heartbeat"),
        out_of_section=one(obs.out_of_section, "out_of_section"),
        sections=sections,
    )


@dataclass(frozen=True)
class Effective:
    """The timeouts one cycle's monitor uses."""

    heartbeat: float | None
    initial: float | None
    sections: dict[str, float]
    out_of_section: float | None
    calculated: frozenset[str]


def effective(
    heartbeat: float | None,
    initial: float | None,
    sections: Mapping[str, float],
    out_of_section: float | None,
    calc: Calculated | None,
) -> Effective:
    """Calculated values replace the explicit ones they have; the others stay."""
    if calc is None:
        return Effective(heartbeat, initial, dict(sections), out_of_section, frozenset())
    merged = dict(sections)
    merged.update(calc.sections)
    return Effective(
        heartbeat=calc.heartbeat if calc.heartbeat is not None else heartbeat,
        initial=calc.initial if calc.initial is not None else initial,
        sections=merged,
        out_of_section=calc.out_of_section if calc.out_of_section is not None else out_of_section,
        calculated=calc.names(),
    )


def safety_factor_value(text: Any) -> float:
    """`--ft-safety-factor`: a number from 1 to 1000 (below 1 would call normal intervals
    hangs)."""
    try:
        value = float(str(text).strip())
    except ValueError:
        raise ValueError("must be a number") from None
    if not 1.0 <= value <= 1000.0:
        raise ValueError("must be between 1 and 1000")
    return value


def state_name(node: int | None) -> str:
    return "calculated_timeouts.json" if node is None else f"calculated_timeouts.node{node}.json"


class AutoTimeouts:
    """The job's observations and calculated timeouts, kept across cycles and re-runs."""

    def __init__(
        self, job_dir: str | Path, safety_factor: float, say: Callable[[str], None]
    ) -> None:
        self.job_dir = Path(job_dir)
        self.safety_factor = float(safety_factor)
        self.say = say
        self.observed = Observations()  # all completed cycles of this job
        self.current: Calculated | None = None  # used by the next cycles
        self._cycle: Observations | None = None  # the running cycle's recorder
        self._loaded = False
        self._node: int | None = None

    def recorder(self, node: int | None) -> Observations:
        """A fresh recorder for a new cycle; the first call loads the stored state."""
        self._node = node
        if not self._loaded:
            self._loaded = True
            self._load()
        self._cycle = Observations()
        return self._cycle

    def _path(self) -> Path:
        return self.job_dir / state_name(self._node)

    def _load(self) -> None:
        path = self._path()
        try:
            data = loads_json(read_small_text(path, 1024 * 1024))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:  # also a FIFO, an oversized or deep file
            self.say(f"warning: calculated timeouts in {path} not read ({exc}); starting afresh")
            return
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            self.say(f"warning: calculated timeouts in {path} not understood; starting afresh")
            return
        self.observed = Observations.from_json(data.get("observed"))
        calc = calculate(self.observed, self.safety_factor)
        if calc.names():
            self.current = calc
            self.say(
                f"timeouts calculated by an earlier run of this job ({path.name}, safety factor "
                f"{self.safety_factor:g}): {calc.describe()}"
            )

    def end_cycle(self, cycle: int) -> Calculated | None:
        """Fold the cycle's observations in; returns the new timeouts when they changed."""
        rec, self._cycle = self._cycle, None
        if rec is None:
            return None
        self.observed.merge(rec)
        calc = calculate(self.observed, self.safety_factor)
        if not calc.names() or calc == self.current:
            return None
        self.current = calc
        self.say(
            f"timeouts calculated after cycle {cycle} (safety factor {self.safety_factor:g} x "
            f"the longest interval observed): {calc.describe()}; used from cycle {cycle + 1}"
        )
        self._store()
        return calc

    def _store(self) -> None:
        path = self._path()
        body = {
            "version": STATE_VERSION,
            "safety_factor": self.safety_factor,
            "observed": self.observed.to_json(),
            "calculated": self.fact_fields(),
        }
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(body, indent=1, sort_keys=True), encoding="utf-8")
            os.replace(tmp, path)
        except OSError as exc:
            self.say(f"warning: calculated timeouts not stored in {path}: {exc}")

    def fact(self, cycle: int, eff: Effective) -> str:
        """The `timeouts` fact of a cycle: the values its monitor uses."""
        from relaunch.launcher import facts

        return facts.fact(
            "timeouts",
            cycle,
            heartbeat=eff.heartbeat,
            initial=eff.initial,
            sections=dict(eff.sections),
            out_of_section=eff.out_of_section,
            calculated=sorted(eff.calculated),
            safety_factor=self.safety_factor,
        )

    def fact_fields(self) -> dict[str, Any]:
        c = self.current or Calculated()
        return {
            "heartbeat": c.heartbeat,
            "initial": c.initial,
            "sections": dict(c.sections),
            "out_of_section": c.out_of_section,
        }
