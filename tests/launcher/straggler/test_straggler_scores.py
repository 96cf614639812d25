"""Unit tests of straggler scoring (launcher side) and section timing (worker side).

The scorer is fed summaries as the workers send them; the worker timer runs real sections
(time.sleep) and sends to a list. No test depends on timing: reports are triggered by
count (`report()`), and the jitter test uses seeded pseudo-random durations."""

from __future__ import annotations

import json
import random
import types
from typing import Any

import pytest

from relaunch.launcher.straggler.scores import (
    StragglerReports,
    StragglerScorer,
    parse_summary,
    score_report,
)
from relaunch.launcher.straggler.worker import StragglerTimer, choose_timer

MS = 1_000_000


def summ(ms: float) -> dict[str, list[int]]:
    med = int(ms * MS)
    return {"fwd": [5, med, med, 5 * med]}


def scorer(ranks: int = 4, threshold: float = 0.7) -> tuple[StragglerScorer, list[str]]:
    lines: list[str] = []
    return StragglerScorer(3, "node0", range(ranks), threshold, lines.append), lines


def facts(lines: list[str]) -> list[dict[str, Any]]:
    assert all(line.startswith("fact: ") for line in lines)
    return [json.loads(line[len("fact: ") :]) for line in lines]


def test_relative_and_individual_scores() -> None:
    scores = score_report(
        {
            0: {"fwd": 10.0, "bwd": 20.0},
            1: {"fwd": 10.0, "bwd": 20.0},
            2: {"fwd": 40.0, "bwd": 20.0},
        },
        {
            0: {"fwd": 10.0, "bwd": 20.0},
            1: {"fwd": 10.0, "bwd": 20.0},
            2: {"fwd": 20.0, "bwd": 20.0},
        },
    )
    assert scores[0].relative == 1.0 and scores[0].individual == 1.0
    assert (scores[2].section, scores[2].relative, scores[2].individual) == ("fwd", 0.25, 0.5)
    # a section only one rank runs cannot be compared: no score from it
    assert score_report({0: {"a": 1.0}, 1: {"b": 5.0}}, {}) == {}


def test_a_slow_rank_is_named_at_its_second_report_and_again_when_the_run_doubles() -> None:
    sc, lines = scorer()
    for n in range(1, 9):
        for r in range(4):
            sc.add(r, n, summ(100 if r == 2 else 20))
        if n == 1:
            assert lines == []  # one report below the threshold is not enough
    got = facts(lines)
    assert [(f["rank"], f["reports"], f["report"]) for f in got] == [
        (2, 2, 2),
        (2, 4, 4),
        (2, 8, 8),
    ]
    f = got[0]
    assert (f["fact"], f["cycle"], f["node"], f["section"]) == ("straggler", 3, "node0", "fwd")
    assert f["relative"] == 0.2 and f["individual"] == 1.0 and f["threshold"] == 0.7
    summary = json.loads(sc.summary_fact()[len("fact: ") :])
    assert summary["fact"] == "straggler_scores" and summary["reports"] == 8
    assert summary["ranks"]["2"]["below"] == 8 and summary["ranks"]["0"]["below"] == 0


def test_a_rank_that_recovers_starts_its_count_again() -> None:
    sc, lines = scorer()
    pattern = [100, 20, 100, 20, 100, 100]  # below, above, below, above, below, below
    for n, ms in enumerate(pattern, start=1):
        for r in range(4):
            sc.add(r, n, summ(ms if r == 1 else 20))
    assert [(f["rank"], f["report"]) for f in facts(lines)] == [(1, 6)]


def test_a_report_waits_for_every_rank_and_closes_without_a_rank_two_reports_behind() -> None:
    sc, lines = scorer(ranks=3)
    sc.add(0, 1, summ(20))
    sc.add(1, 1, summ(100))
    assert sc.reports == 0  # rank 2 has not sent its first summary
    sc.add(2, 1, summ(20))
    assert sc.reports == 1
    # rank 2 goes quiet: report 2 is scored once another rank sent its 4th summary
    for n in (2, 3):
        sc.add(0, n, summ(20))
        sc.add(1, n, summ(100))
    assert sc.reports == 1
    sc.add(0, 4, summ(20))
    assert sc.reports == 2  # report 2, without rank 2
    assert [f["rank"] for f in facts(lines)] == [1]
    sc.add(2, 2, summ(20))  # a late summary of a report already scored is dropped
    assert sc.reports == 2


def test_jitter_of_alike_ranks_never_names_one() -> None:
    rng = random.Random(17)
    sc, lines = scorer(ranks=8)
    for n in range(1, 1001):
        for r in range(8):
            # every sample within +-30% and an occasional 2x outlier: the median of a
            # report's samples, as the worker sends it
            samples = sorted(
                20 * rng.uniform(0.7, 1.3) * (2 if rng.random() < 0.1 else 1) for _ in range(9)
            )
            sc.add(r, n, summ(samples[4]))
    assert sc.reports == 1000 and lines == []


def test_malformed_summaries_are_dropped() -> None:
    assert parse_summary(None) == {}
    assert parse_summary({"fwd": [1]}) == {}
    assert parse_summary({"fwd": [1, "x"]}) == {}
    assert parse_summary({"fwd": [1, 0]}) == {}
    assert parse_summary({"fwd": [1, float("inf")]}) == {}
    assert parse_summary({"": [1, 5]}) == {}
    assert parse_summary({"x" * 101: [1, 5]}) == {}
    assert parse_summary({"fwd": [1, True]}) == {}
    assert parse_summary({"ok": [1, 5], "bad": "y"}) == {"ok": 5.0}
    reports = StragglerReports(1.0, 0.7, lambda s: None)
    env: dict[str, str] = {}
    reports.start_cycle(0, None, [0, 1], env)
    assert env == {"RELAUNCH_STRAGGLER_INTERVAL": "1"}
    for msg in ({"n": "1", "sec": summ(5)}, {"n": True}, {"n": 1, "sec": [1]}, {}):
        reports.on_message(0, 0, msg)  # never raises
    reports.on_message(9, 0, {"n": 1, "sec": summ(5)})  # another cycle: ignored
    assert reports.end_cycle() is None  # nothing scored
    off = StragglerReports(0.0, 0.7, lambda s: None)
    off.start_cycle(0, None, [0], env)
    assert env["RELAUNCH_STRAGGLER_INTERVAL"] == "0" and off.scorer is None


# ------------------------------------------------------------------ worker side
def test_timer_sends_numbered_summaries_of_its_sections() -> None:
    sent: list[tuple[str, dict[str, Any]]] = []
    t = StragglerTimer(lambda kind, **f: sent.append((kind, f)), interval_s=3600.0)
    assert t.enabled and t.timer == "cpu"
    for _ in range(3):
        with t.section("fwd"):
            pass
    with t.section("bwd"):
        pass
    assert sent == []  # the interval is not over
    assert t.report() is True
    kind, fields = sent[0]
    assert kind == "strag" and fields["n"] == 1 and fields["tm"] == "cpu"
    assert fields["sec"]["fwd"][0] == 3 and fields["sec"]["bwd"][0] == 1
    count, median, low, total = fields["sec"]["fwd"]
    assert 0 <= low <= median <= total
    assert t.report() is False  # nothing timed since: nothing sent
    with t.section("fwd"):
        pass
    t.report()
    assert [f["n"] for _, f in sent] == [1, 2]


def test_timer_reports_when_a_section_ends_after_the_interval() -> None:
    sent: list[dict[str, Any]] = []
    t = StragglerTimer(lambda kind, **f: sent.append(f), interval_s=1e-9)
    with t.section("a"):  # the first section starts the first interval
        pass
    assert sent == []
    with t.section("a"):
        pass
    assert [f["n"] for f in sent] == [1]


def test_timer_is_a_no_op_without_a_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RELAUNCH_STRAGGLER_INTERVAL", raising=False)
    sent: list[Any] = []
    t = StragglerTimer(lambda kind, **f: sent.append(f))
    assert not t.enabled and t.timer == "off"
    with t.section("fwd"):
        pass
    assert t.report() is False and sent == []
    monkeypatch.setenv("RELAUNCH_STRAGGLER_INTERVAL", "bogus")
    assert not StragglerTimer(lambda kind, **f: None).enabled


def _fake_torch(available: bool, initialised: bool, broken: bool = False) -> Any:
    def is_available() -> bool:
        if broken:
            raise RuntimeError("driver")
        return available

    cuda = types.SimpleNamespace(is_available=is_available, is_initialized=lambda: initialised)
    return types.SimpleNamespace(cuda=cuda)


def test_timer_choice_cuda_only_when_torch_has_cuda_initialised() -> None:
    # No GPU on this machine: the selection logic is tested with stand-in modules; the
    # CUDA-event path itself runs only on a GPU (docs/straggler.md).
    assert choose_timer({}) == "cpu"
    assert choose_timer({"torch": types.SimpleNamespace()}) == "cpu"
    assert choose_timer({"torch": _fake_torch(False, False)}) == "cpu"
    assert choose_timer({"torch": _fake_torch(True, False)}) == "cpu"
    assert choose_timer({"torch": _fake_torch(True, True)}) == "cuda"
    assert choose_timer({"torch": _fake_torch(True, True, broken=True)}) == "cpu"
    mods: dict[str, Any] = {}
    t = StragglerTimer(lambda kind, **f: None, interval_s=10.0, modules=mods)
    assert t.timer == "cpu"
    mods["torch"] = _fake_torch(True, True)
    with t.section("fwd"):
        pass
    t.report()  # the choice is made again at each report
    assert t.timer == "cuda"


class _StandInEvent:
    """Stands in for torch.cuda.Event where there is no GPU: `elapsed_time` is in ms,
    like CUDA's; each recorded event gets the next tick of a 4 ms clock."""

    ticks = 0

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.at: int | None = None

    def record(self) -> None:
        _StandInEvent.ticks += 1
        self.at = _StandInEvent.ticks

    def synchronize(self) -> None:
        assert self.at is not None

    def elapsed_time(self, end: _StandInEvent) -> float:
        return 4.0 * (end.at - self.at)


def test_cuda_timing_reads_the_events_at_report_time_only() -> None:
    torch = _fake_torch(True, True)
    torch.cuda.Event = _StandInEvent
    sent: list[dict[str, Any]] = []
    t = StragglerTimer(
        lambda kind, **f: sent.append(f), interval_s=3600.0, modules={"torch": torch}
    )
    assert t.timer == "cuda"
    for _ in range(3):
        with t.section("fwd"):
            pass
    assert len(t._pending) == 3 and sent == []  # nothing read inside the training step
    t.report()
    [f] = sent
    assert f["tm"] == "cuda" and f["sec"]["fwd"] == [3, 4_000_000, 4_000_000, 12_000_000]
    assert t._pending == []


def test_nested_sections_of_one_name_are_each_timed() -> None:
    sent: list[dict[str, Any]] = []
    t = StragglerTimer(lambda kind, **f: sent.append(f), interval_s=3600.0)
    with t.section("a"), t.section("a"):
        pass
    t.report()
    count, median, low, total = sent[0]["sec"]["a"]
    assert count == 2 and low <= median and total >= 2 * low


def test_section_names_that_are_not_strings_are_sent_as_strings() -> None:
    sent: list[dict[str, Any]] = []
    t = StragglerTimer(lambda kind, **f: sent.append(f), interval_s=3600.0)
    with t.section(("layer", 3)):  # type: ignore[arg-type]
        pass
    with t.section(7):  # type: ignore[arg-type]
        pass
    t.report()
    json.dumps(sent[0])
    assert set(sent[0]["sec"]) == {"('layer', 3)", "7"}
