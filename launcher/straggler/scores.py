"""Launcher-side straggler scores: gather the ranks' section summaries, name slow ranks.

Each rank's `launcher.straggler.worker.StragglerTimer` sends its n-th summary (`n`, per
section count/median/min/total ns) over the heartbeat socket once per report interval.
`StragglerScorer` (one per cycle and node) groups the n-th summaries of the node's ranks
into report n and scores it when every rank of the node has sent its n-th summary (or when
some rank is already two summaries further: the missing ranks are left out of it).

Per report, per rank and section present on at least two ranks:

- relative score = median over the ranks of the section's median / this rank's median
  (1.0 = typical, lower = slower; NVRx's relative performance score);
- individual score = this rank's best (lowest) median of the section in this cycle / this
  rank's median now (1.0 = as fast as it ever was).

A rank's score in a report is that of its section with the lowest relative score. A rank
below `threshold` (relative) in `min_reports` consecutive reports is a straggler: the
scorer writes a `straggler` fact when it first gets there and again each time the run of
reports doubles (2, 4, 8, ...); at the cycle's end, one `straggler_scores` fact sums up
every rank (last and lowest relative score, longest run below the threshold). Medians and
the consecutive-reports rule keep ordinary jitter from naming a rank. On one node the
scores compare the node's ranks; with several nodes each node's reports go through the
rendezvous store (`launcher.straggler.exchange`), the ranks of all nodes are scored
together and each node names its own ranks (docs/straggler.md).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from relaunch.launcher.facts import fact
from relaunch.launcher.straggler.exchange import ExchangeThread, StoreExchange

MIN_REPORTS = 2  # consecutive reports below the threshold that name a straggler
STALE_AFTER = (
    2  # a report is scored without the ranks still missing once another rank is this far ahead
)
MAX_RANKS = 4096
EXCHANGE_WAIT_S = 30.0  # longest a report waits for the other nodes' (multi-node)
END_WAIT_S = 2.0  # longest the end of a cycle waits for reports still in the store
MAX_SECTIONS = 64


def threshold_value(text: str) -> float:
    """`--ft-straggler-threshold`: 0 < T <= 1."""
    value = float(text)
    if not 0 < value <= 1:
        raise ValueError("must satisfy 0 < T <= 1")
    return value


def report_interval_value(text: str) -> float:
    """`--ft-straggler-report-interval`: finite seconds >= 0 (0: off)."""
    value = float(text)
    if not 0 <= value < 1e9:
        raise ValueError("must be finite seconds >= 0 (0: off)")
    return value


def _median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2


def parse_summary(sec: Any) -> dict[str, float]:
    """{section: median_ns} from a worker's `sec` field; malformed entries are dropped."""
    out: dict[str, float] = {}
    if not isinstance(sec, dict):
        return out
    for name, v in list(sec.items())[:MAX_SECTIONS]:
        if not isinstance(name, str) or not name or len(name) > 100:
            continue
        if not isinstance(v, list) or len(v) < 2:
            continue
        med = v[1]
        if isinstance(med, bool) or not isinstance(med, (int, float)):
            continue
        if not math.isfinite(med) or med <= 0:
            continue
        out[name] = float(med)
    return out


@dataclass
class RankScore:
    """One rank's score in one report."""

    rank: int
    section: str
    relative: float
    individual: float


@dataclass
class _RankTrack:
    below: int = 0  # consecutive reports below the threshold, up to now
    longest: int = 0
    last: RankScore | None = None
    lowest: float | None = None
    best: dict[str, float] = field(default_factory=dict)  # section -> lowest median_ns


def score_report(
    summaries: Mapping[int, Mapping[str, float]], best: Mapping[int, Mapping[str, float]]
) -> dict[int, RankScore]:
    """Scores of one report: `summaries` {rank: {section: median_ns}}, `best` {rank:
    {section: lowest median_ns so far, this report included}}. Ranks alone in all their
    sections get no score."""
    by_section: dict[str, list[float]] = {}
    for secs in summaries.values():
        for name, med in secs.items():
            by_section.setdefault(name, []).append(med)
    ref = {name: _median(v) for name, v in by_section.items() if len(v) >= 2}
    out: dict[int, RankScore] = {}
    for rank, secs in summaries.items():
        worst: RankScore | None = None
        for name, med in secs.items():
            if name not in ref:
                continue
            rel = ref[name] / med
            ind = best.get(rank, {}).get(name, med) / med
            if (
                worst is None
                or rel < worst.relative
                or (rel == worst.relative and name < worst.section)
            ):
                worst = RankScore(rank, name, rel, ind)
        if worst is not None:
            out[rank] = worst
    return out


class StragglerScorer:
    """Reports and straggler facts of one cycle on one node. Thread-safe."""

    def __init__(
        self,
        cycle: int,
        node: int | str | None,
        ranks: Iterable[int],
        threshold: float,
        emit: Callable[[str], None],
        min_reports: int = MIN_REPORTS,
        exchange: StoreExchange | None = None,
    ) -> None:
        self.cycle = cycle
        self.node = node
        self.expected = frozenset(int(r) for r in ranks)
        self.threshold = float(threshold)
        self.min_reports = max(1, int(min_reports))
        self._emit = emit
        self._lock = threading.Lock()
        self._pending: dict[int, dict[int, dict[str, float]]] = {}  # n -> rank -> summary
        self._next = 1  # the next report number to score
        self._latest: dict[int, int] = {}  # rank -> highest n received
        self._tracks: dict[int, _RankTrack] = {}
        self.reports = 0  # reports scored
        self.facts: list[str] = []
        self._closed = False
        # several nodes: each local report goes through the store first (its own thread)
        self._exchange = ExchangeThread(exchange, self._score_merged) if exchange else None

    def add(self, rank: int, n: int, sec: Any) -> list[str]:
        """Take rank's n-th summary; returns (and emits) the straggler facts it led to."""
        summary = parse_summary(sec)
        with self._lock:
            if n < self._next or n > self._next + 10_000 or not summary:
                return []
            if rank not in self._latest and len(self._latest) >= MAX_RANKS:
                return []
            self._latest[rank] = max(n, self._latest.get(rank, 0))
            self._pending.setdefault(n, {})[rank] = summary
            lines = self._score_ready()
            self.facts.extend(lines)
        for line in lines:
            self._emit(line)
        return lines

    def _ready(self, n: int) -> bool:
        got = self._pending.get(n, {})
        expected = self.expected or set(self._latest)
        if expected and expected <= set(got):
            return True
        return max(self._latest.values(), default=0) >= n + STALE_AFTER

    def _score_ready(self) -> list[str]:
        lines: list[str] = []
        while self._ready(self._next):
            summaries = self._pending.pop(self._next, {})
            self._next += 1
            if self._exchange is not None:
                self._exchange.submit(self._next - 1, summaries)
                continue  # scored with the other nodes' ranks by _score_merged
            if len(summaries) < 2:
                continue  # nothing to compare: not a report
            lines += self._score(summaries)
        return lines

    def _score_merged(self, n: int, summaries: dict[int, dict[str, float]]) -> None:
        """Report n with every node's ranks (the exchange thread calls it, in order)."""
        with self._lock:
            if self._closed or len(summaries) < 2:
                return
            lines = self._score(summaries)
            self.facts.extend(lines)
        for line in lines:
            self._emit(line)

    def _mine(self, rank: int) -> bool:
        """Facts name this node's ranks only (other nodes name theirs)."""
        return self._exchange is None or rank in self.expected

    def close(self, timeout: float = 2.0) -> None:
        """Stop the exchange (reports still in flight after `timeout` s are dropped)."""
        if self._exchange is not None:
            self._exchange.close(timeout)
        with self._lock:
            self._closed = True

    def _score(self, summaries: dict[int, dict[str, float]]) -> list[str]:
        self.reports += 1
        best: dict[int, dict[str, float]] = {}
        for rank, secs in summaries.items():
            track = self._tracks.setdefault(rank, _RankTrack())
            for name, med in secs.items():
                prev = track.best.get(name)
                track.best[name] = med if prev is None else min(prev, med)
            best[rank] = track.best
        lines: list[str] = []
        for rank, score in sorted(score_report(summaries, best).items()):
            track = self._tracks[rank]
            track.last = score
            track.lowest = (
                score.relative if track.lowest is None else min(track.lowest, score.relative)
            )
            if score.relative < self.threshold:
                track.below += 1
                track.longest = max(track.longest, track.below)
                k = track.below
                named = k == self.min_reports or (k > self.min_reports and k & (k - 1) == 0)
                if named and self._mine(rank):
                    lines.append(self._straggler_fact(score, k))
            else:
                track.below = 0
        return lines

    def _straggler_fact(self, s: RankScore, k: int) -> str:
        return fact(
            "straggler",
            self.cycle,
            rank=s.rank,
            node=self.node,
            section=s.section,
            relative=round(s.relative, 3),
            individual=round(s.individual, 3),
            threshold=self.threshold,
            reports=k,
            report=self.reports,
        )

    def summary_fact(self) -> str | None:
        """The cycle's `straggler_scores` fact (None when no report was scored)."""
        with self._lock:
            if not self.reports:
                return None
            ranks = {}
            for rank, t in sorted(self._tracks.items()):
                if t.last is None or not self._mine(rank):
                    continue
                ranks[str(rank)] = {
                    "relative": round(t.last.relative, 3),
                    "lowest": round(t.lowest if t.lowest is not None else t.last.relative, 3),
                    "individual": round(t.last.individual, 3),
                    "section": t.last.section,
                    "below": t.longest,
                }
            return fact(
                "straggler_scores",
                self.cycle,
                node=self.node,
                threshold=self.threshold,
                min_reports=self.min_reports,
                reports=self.reports,
                ranks=ranks,
            )


class StragglerReports:
    """The agent's glue: one scorer per cycle, fed from the heartbeat receiver thread.

    `start_cycle` sets `RELAUNCH_STRAGGLER_INTERVAL` for the workers about to start;
    `on_message` never raises (it runs on the heartbeat thread); `end_cycle` returns the
    cycle's `straggler_scores` fact, if any report was scored.
    """

    def __init__(self, interval_s: float, threshold: float, emit: Callable[[str], None]) -> None:
        self.interval_s = float(interval_s)
        self.threshold = float(threshold)
        self._emit = emit
        self.scorer: StragglerScorer | None = None

    def start_cycle(
        self,
        cycle: int,
        node: int | str | None,
        ranks: Iterable[int],
        environ: Any,
        store: Any = None,
        nodes: int = 1,
    ) -> None:
        """`store`, `nodes`: the round's rendezvous store and node count; with more than one
        node and a store, ranks of every node are scored together (`node` is the index)."""
        from relaunch.launcher.straggler.worker import ENV_INTERVAL

        environ[ENV_INTERVAL] = f"{self.interval_s:g}"
        if self.interval_s <= 0:
            self.scorer = None
            return
        exchange = None
        if store is not None and nodes > 1 and isinstance(node, int):
            wait_s = min(2 * self.interval_s, EXCHANGE_WAIT_S)
            exchange = StoreExchange(store, cycle, node, nodes, wait_s)
        self.scorer = StragglerScorer(
            cycle, node, ranks, self.threshold, self._emit, exchange=exchange
        )

    def on_message(self, cycle: int, rank: int, msg: Mapping[str, Any]) -> None:
        scorer = self.scorer
        n = msg.get("n")
        if scorer is None or scorer.cycle != cycle or isinstance(n, bool) or not isinstance(n, int):
            return
        try:
            scorer.add(int(rank), n, msg.get("sec"))
        except Exception:  # noqa: BLE001 - a damaged summary must not stop the heartbeat thread
            return

    def end_cycle(self) -> str | None:
        """Stop the cycle's scorer; its `straggler_scores` fact. May wait up to
        END_WAIT_S for reports still going through the store: call it without locks."""
        scorer, self.scorer = self.scorer, None
        if scorer is None:
            return None
        scorer.close(END_WAIT_S)
        return scorer.summary_fact()
