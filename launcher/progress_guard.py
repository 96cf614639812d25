"""The launcher's own early termination: N restarts without training progress end the job.

Progress is what the workers report through `launcher.client.report_progress(iteration=)`
(the `[relaunch] progress rank=R iteration=N` lines). After every restart's rendezvous the
launcher compares the highest iteration reported so far in the job (any rank, any node)
with the job's best before the cycle that just ended: a cycle made progress when the best
rose by at least `--ft-min-progress-iterations` (NVRx's `min_progress_iterations`,
default 1). Consecutive restarts without progress are counted; at
`--ft-max-no-progress-restarts` (the verdict rule's threshold, NVRx's
`--ft-max-no-progress-cycles`) the job ends before the next cycle starts, whatever the
attribution endpoint says (also with `--ft-attribution-endpoint off`).

Until some rank has reported an iteration in this run of the launcher, nothing is counted:
a job whose workers never use the client (or fail every time before they report once)
cannot be told from one that progresses, and `--max-restarts` alone bounds it (NVRx skips
the check the same way). Once reports were seen, a cycle without any report counts as no
progress (e.g. workers that now crash while loading a checkpoint).

Job-wide: each node knows its own ranks' reports only. After each rendezvous the nodes
exchange their state through the rendezvous store (`exchange`, keys
`relaunch/progress[/tag]/<rank>`, beside `launcher.jobwide`'s) and every node applies
`merge` and `step` to the same inputs, so all nodes reach the same count and the same
decision at the same cycle boundary; a node that joins late adopts the others' count.
Pure logic plus the store exchange; no torch import.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from relaunch.attribution.core.policy_config import MAX_VALUE
from relaunch.launcher import facts

EXCHANGE_TIMEOUT_S = 300.0  # the other nodes left the same rendezvous round just now
_KEY = "relaunch/progress"


@dataclass(frozen=True)
class GuardState:
    """The job-wide state after a decision (the same on every node)."""

    best: int | None = None  # highest iteration reported in the job before the next cycle
    count: int = 0  # consecutive restarts without progress
    reported: bool = False  # some rank reported an iteration (progress is observable)


@dataclass(frozen=True)
class Proposal:
    """One node's contribution to the exchange after a rendezvous."""

    agreed: GuardState  # the state this node agreed on at the previous boundary
    best_seen: int | None  # highest iteration this node's ranks ever reported
    ended: bool  # this node ended a cycle since the previous boundary

    def to_json(self) -> str:
        a = self.agreed
        return json.dumps([a.best, a.count, a.reported, self.best_seen, self.ended])

    @staticmethod
    def from_json(text: str | bytes) -> Proposal:
        best, count, reported, seen, ended = json.loads(text)
        return Proposal(
            GuardState(_opt_int(best), int(count), bool(reported)), _opt_int(seen), bool(ended)
        )


@dataclass(frozen=True)
class Decision:
    state: GuardState
    evaluated: bool  # a restart was judged (False: first rendezvous, or nothing observable)
    progressed: bool | None  # None: not evaluated
    previous_best: int | None
    cycle_best: int | None  # the job's best including the cycle that ended
    limit: int
    end: bool  # the job ends now
    need: int | None = None  # the iteration that would have counted as progress


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


def _max(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def enabled(limit: int) -> bool:
    """0/-1 (`--ft-max-no-progress-cycles`) are stored as the maximum: no ceiling."""
    return 0 < limit < MAX_VALUE


def merge(proposals: Iterable[Proposal]) -> tuple[GuardState, int | None, bool]:
    """(the previously agreed state, the job's best now, whether a cycle ended)."""
    props = list(proposals)
    prev = GuardState(
        best=_max(p.agreed.best for p in props),
        count=max((p.agreed.count for p in props), default=0),
        reported=any(p.agreed.reported for p in props),
    )
    best_now = _max([prev.best, *(p.best_seen for p in props)])
    return prev, best_now, any(p.ended for p in props)


def step(
    prev: GuardState, best_now: int | None, ended: bool, limit: int, min_iterations: int
) -> Decision:
    """Judge the restart that follows a cycle: did the job's best rise enough?"""
    reported = prev.reported or best_now is not None
    if not ended or not reported:
        state = replace(prev, best=best_now, reported=reported)
        return Decision(state, False, None, prev.best, best_now, limit, False)
    if prev.best is None:
        progressed = best_now is not None  # the first reports: the baseline is unknown
    else:
        progressed = best_now is not None and best_now >= prev.best + min_iterations
    count = 0 if progressed else prev.count + 1
    state = GuardState(best=best_now, count=count, reported=True)
    end = enabled(limit) and count >= limit
    need = None if prev.best is None else prev.best + min_iterations
    return Decision(state, True, progressed, prev.best, best_now, limit, end, need)


class ProgressGuard:
    """One launcher's view: its ranks' reports, the agreed state, the decisions."""

    def __init__(self, limit: int, min_iterations: int = 1) -> None:
        self.limit = int(limit)
        self.min_iterations = max(1, int(min_iterations))
        self.agreed = GuardState()
        self.best_seen: int | None = None
        self._ended = False

    @property
    def enabled(self) -> bool:
        return enabled(self.limit)

    def cycle_ended(self, iterations: Mapping[int, int] | None) -> None:
        """A cycle of this node ended; `iterations`: the last one each rank reported."""
        self._ended = True
        self.best_seen = _max([self.best_seen, *(iterations or {}).values()])

    def proposal(self) -> Proposal:
        return Proposal(self.agreed, self.best_seen, self._ended)

    def judge(
        self, store: Any, rank: int, world: int, *, tag: str, warn: Callable[[str], None]
    ) -> Decision:
        """Exchange with the other nodes (`exchange`), then `decide`. A failed exchange (a
        node gone between the rendezvous and the exchange) decides on this node's view."""
        try:
            proposals = exchange(store, rank, world, self.proposal(), tag=tag)
        except (RuntimeError, OSError, ValueError, TypeError, TimeoutError) as exc:
            warn(f"progress not agreed with the other nodes: {exc}")
            proposals = [self.proposal()]
        return self.decide(proposals)

    def decide(self, proposals: Iterable[Proposal]) -> Decision:
        prev, best_now, ended = merge(proposals)
        decision = step(prev, best_now, ended, self.limit, self.min_iterations)
        self.agreed = decision.state
        self._ended = False
        return decision


def describe(d: Decision, cycle: int) -> str:
    """The launcher's line for a judged restart."""
    need = "" if d.need is None else f", progress needs {d.need}"
    seen = (
        f"best iteration {d.previous_best if d.previous_best is not None else 'none'} before, "
        f"{d.cycle_best if d.cycle_best is not None else 'none'} after{need}"
    )
    limit = f"{d.limit}" if enabled(d.limit) else "off"
    if d.progressed:
        return f"progress guard: cycle {cycle} made progress ({seen}); count reset (limit {limit})"
    return (
        f"progress guard: cycle {cycle} made no progress ({seen}): "
        f"{d.state.count} consecutive restart(s) without progress (limit {limit})"
    )


def lines(d: Decision, cycle: int) -> list[str]:
    """The cycle log's line and fact for a judged restart of `cycle`."""
    return [
        describe(d, cycle),
        facts.fact(
            "progress_guard",
            cycle,
            progressed=d.progressed,
            best_before=d.previous_best,
            best=d.cycle_best,
            count=d.state.count,
            limit=d.limit if enabled(d.limit) else None,
        ),
    ]


def end_reason(d: Decision) -> str:
    """Why the job ends (console, cycle log, the job's recorded end)."""
    return (
        f"no progress: {d.state.count} consecutive restarts without a higher iteration than "
        f"{d.previous_best} (--ft-max-no-progress-restarts {d.limit})"
    )


def exchange(store: Any, rank: int, world: int, mine: Proposal, *, tag: str = "") -> list[Proposal]:
    """Every node's proposal, through the rendezvous store (as `launcher.jobwide.agree`)."""
    if world <= 1:
        return [mine]
    base = f"{_KEY}/{tag}" if tag else _KEY
    store.set(f"{base}/{rank}", mine.to_json())
    keys = [f"{base}/{r}" for r in range(world)]
    store.wait(keys, timedelta(seconds=EXCHANGE_TIMEOUT_S))
    return [Proposal.from_json(store.get(k)) for k in keys]
