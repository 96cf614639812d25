"""Unit tests of the progress guard's counting (`launcher.progress_guard`): pure logic."""

from __future__ import annotations

from datetime import timedelta

import pytest

from relaunch.launcher.progress_guard import (
    GuardState,
    ProgressGuard,
    Proposal,
    describe,
    enabled,
    exchange,
    merge,
    step,
)


def _run(guard: ProgressGuard, cycles: list[dict[int, int] | None]) -> list[tuple]:
    """Feed cycles to one node's guard; one decision per restart boundary."""
    out = []
    for iterations in cycles:
        guard.cycle_ended(iterations)
        d = guard.decide([guard.proposal()])
        out.append((d.evaluated, d.progressed, d.state.count, d.end))
    return out


def test_first_rendezvous_is_not_judged() -> None:
    g = ProgressGuard(limit=2)
    d = g.decide([g.proposal()])
    assert not d.evaluated and not d.end and d.state == GuardState()


def test_no_progress_counts_up_to_the_limit() -> None:
    g = ProgressGuard(limit=3)
    # first reports are progress (no baseline); the same iteration again is not
    assert _run(g, [{0: 5, 1: 5}, {0: 5, 1: 4}, {0: 5}, {1: 5}]) == [
        (True, True, 0, False),
        (True, False, 1, False),
        (True, False, 2, False),
        (True, False, 3, True),
    ]


def test_progress_resets_the_count() -> None:
    g = ProgressGuard(limit=2)
    assert [r[2] for r in _run(g, [{0: 10}, {0: 10}, {0: 11}, {0: 11}])] == [0, 1, 0, 1]
    assert g.agreed.best == 11


def test_resuming_below_the_best_is_not_progress() -> None:
    """Cycle 1 resumes from a checkpoint at 10 and reaches 12 again: no progress."""
    g = ProgressGuard(limit=5)
    assert _run(g, [{0: 12}, {0: 12}, {0: 11}]) == [
        (True, True, 0, False),
        (True, False, 1, False),
        (True, False, 2, False),
    ]


def test_min_progress_iterations() -> None:
    g = ProgressGuard(limit=5, min_iterations=10)
    assert [r[1] for r in _run(g, [{0: 100}, {0: 109}, {0: 119}])] == [True, False, True]


def test_nothing_is_counted_before_the_first_report() -> None:
    """Workers that never use the client (or fail before reporting) are never ended."""
    g = ProgressGuard(limit=1)
    assert _run(g, [None, {}, None]) == [(False, None, 0, False)] * 3
    # once reports exist, a cycle without any report counts as no progress
    assert _run(g, [{0: 3}, None]) == [(True, True, 0, False), (True, False, 1, True)]


def test_limit_off_counts_but_never_ends() -> None:
    from relaunch.attribution.core.policy_config import MAX_VALUE

    assert not enabled(MAX_VALUE) and not enabled(0) and enabled(1)
    g = ProgressGuard(limit=MAX_VALUE)
    assert _run(g, [{0: 1}, {0: 1}, {0: 1}])[-1] == (True, False, 2, False)


def test_job_wide_merge_is_the_same_on_every_node() -> None:
    """Only node 0's ranks report; node 1 decides the same from the exchange."""
    n0, n1 = ProgressGuard(limit=2), ProgressGuard(limit=2)
    for it0 in (7, 7, 7):
        n0.cycle_ended({0: it0})
        n1.cycle_ended({})
        props = [n0.proposal(), n1.proposal()]
        d0, d1 = n0.decide(props), n1.decide(props)
        assert d0 == d1
    assert d0.state.count == 2 and d0.end


def test_a_late_node_adopts_the_count() -> None:
    old, new = ProgressGuard(limit=3), ProgressGuard(limit=3)
    for _ in range(2):
        old.cycle_ended({0: 4})
        old.decide([old.proposal()])
    assert old.agreed.count == 1
    old.cycle_ended({0: 4})
    props = [old.proposal(), new.proposal()]  # the new node ran no cycle yet
    d_old, d_new = old.decide(props), new.decide(props)
    assert d_old == d_new and d_new.state.count == 2


def test_merge_and_step_directly() -> None:
    a = Proposal(GuardState(best=5, count=1, reported=True), best_seen=6, ended=True)
    b = Proposal(GuardState(), best_seen=None, ended=False)
    prev, best_now, ended = merge([a, b])
    assert prev == GuardState(5, 1, True) and best_now == 6 and ended
    d = step(prev, best_now, ended, limit=2, min_iterations=1)
    assert d.progressed and d.state == GuardState(6, 0, True) and d.need == 6
    d = step(prev, 5, True, limit=2, min_iterations=1)
    assert not d.progressed and d.end and d.state.count == 2


def test_proposal_round_trip_and_bad_text() -> None:
    p = Proposal(GuardState(best=None, count=3, reported=True), best_seen=9, ended=True)
    assert Proposal.from_json(p.to_json()) == p
    with pytest.raises(ValueError):
        Proposal.from_json("not json")


def test_describe_names_the_counts() -> None:
    g = ProgressGuard(limit=2)
    _run(g, [{0: 5}])
    g.cycle_ended({0: 5})
    d = g.decide([g.proposal()])
    text = describe(d, 4)
    assert text == (
        "progress guard: cycle 4 made no progress (best iteration 5 before, 5 after, progress "
        "needs 6): 1 consecutive restart(s) without progress (limit 2)"
    )


class _Store:
    """The subset of a c10d store `exchange` uses, in memory (the launcher test runs the
    real store)."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        self.data[key] = value

    def wait(self, keys: list[str], timeout: timedelta) -> None:
        missing = [k for k in keys if k not in self.data]
        if missing:
            raise TimeoutError(f"missing {missing}")

    def get(self, key: str) -> bytes:
        return self.data[key].encode()


def test_exchange_through_a_store() -> None:
    store = _Store()
    p1 = Proposal(GuardState(best=3, count=1, reported=True), best_seen=3, ended=True)
    store.set("relaunch/progress/r1/1", p1.to_json())
    p0 = Proposal(GuardState(), best_seen=None, ended=True)
    got = exchange(store, 0, 2, p0, tag="r1")
    assert got == [p0, p1]
    assert exchange(store, 0, 1, p0) == [p0]  # a single node needs no store


def test_the_analyzer_reader_skips_the_new_facts() -> None:
    """`restart_agent.facts` accepts the launcher's new kinds without taking them as
    evidence (a progress_guard fact names the judged cycle, not the log's)."""
    from relaunch.launcher import facts
    from relaunch.restart_agent.facts import FactCollector

    c = FactCollector()
    lines = [
        "[relaunch] " + facts.cycle_start(3, "j", None, [0], 1, 1.0),
        "[relaunch] "
        + facts.fact(
            "progress_guard", 2, progressed=False, best_before=5, best=5, count=1, limit=2
        ),
        "[relaunch] "
        + facts.fact(
            "timeouts",
            3,
            heartbeat=1.5,
            initial=5.0,
            sections={"step": 1.0},
            out_of_section=None,
            calculated=["heartbeat"],
            safety_factor=5.0,
        ),
    ]
    taken = [c.line(text, n) for n, text in enumerate(lines, 1)]
    assert taken == [True, False, False]
    assert c.cycle == 3 and c.count == 1 and c.iterations == {}
