"""Unit tests of the monitor's out-of-section rule and the timeout calculation
(`launcher.heartbeat.RankMonitor`, `launcher.timeouts_auto`), on a fake clock."""

from __future__ import annotations

import json
from pathlib import Path

from relaunch.launcher.heartbeat import RankMonitor
from relaunch.launcher.timeouts_auto import (
    AutoTimeouts,
    Calculated,
    Observations,
    calculate,
    effective,
    safety_factor_value,
)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _monitor(clock: Clock, **kw) -> RankMonitor:
    kw.setdefault("heartbeat_timeout", None)
    kw.setdefault("initial_timeout", None)
    return RankMonitor(cycle=0, clock=clock, **kw)


def test_out_of_section_from_the_first_message() -> None:
    c = Clock()
    m = _monitor(c, out_of_section_timeout=10)
    m.observe(0, "hello")
    c.t += 9
    m.observe(0, "hb")  # heartbeats do not reset it
    assert m.find_hang() is None
    c.t += 2
    h = m.find_hang()
    assert h is not None and h.out_of_section_limit == 10 and h.section is None
    assert h.describe() == (
        "hang detected: rank 0 outside any section for 11.0 s (out-of-section timeout 10 s)"
    )


def test_sections_and_progress_restart_the_out_of_section_clock() -> None:
    c = Clock()
    m = _monitor(c, out_of_section_timeout=10)
    m.observe(0, "hello")
    c.t += 8
    m.observe(0, "sec_start", "step", open_section="step")
    c.t += 100  # inside a section: the out-of-section rule does not apply
    assert m.find_hang() is None
    m.observe(0, "sec_end", "step", open_section=None)
    c.t += 8
    m.observe(0, "progress")
    c.t += 8
    assert m.find_hang() is None
    c.t += 3
    assert m.find_hang() is not None


def test_nested_section_end_keeps_the_rank_inside() -> None:
    c = Clock()
    m = _monitor(c, out_of_section_timeout=5)
    m.observe(0, "sec_start", "outer", open_section="outer")
    m.observe(0, "sec_start", "inner", open_section="inner")
    m.observe(0, "sec_end", "inner", open_section="outer")
    c.t += 60
    assert m.find_hang() is None


def test_out_of_section_off_by_default() -> None:
    c = Clock()
    m = _monitor(c)
    m.observe(0, "hello")
    c.t += 10_000
    assert m.find_hang() is None


def test_recorder_measures_completed_intervals_only() -> None:
    c = Clock()
    rec = Observations()
    m = _monitor(c, recorder=rec)
    m.observe(0, "hello")
    c.t += 2.0
    m.observe(0, "hb")  # initial 2.0
    c.t += 0.5
    m.observe(0, "hb")
    c.t += 0.7
    m.observe(0, "sec_start", "step", open_section="step")  # out-of-section 3.2
    c.t += 1.5
    m.observe(0, "sec_end", "step", open_section=None)
    c.t += 0.25
    m.observe(0, "progress")  # out-of-section 0.25
    c.t += 500  # a stall never measures itself
    assert (rec.initial.max_s, rec.initial.count) == (2.0, 1)
    assert (rec.heartbeat.max_s, rec.heartbeat.count) == (1.5, 4)
    assert rec.sections["step"].count == 1 and abs(rec.sections["step"].max_s - 1.5) < 1e-9
    assert rec.out_of_section.count == 2 and abs(rec.out_of_section.max_s - 3.2) < 1e-9


def test_calculate_needs_enough_observations() -> None:
    obs = Observations()
    obs.initial.add(2.0)
    obs.heartbeat.add(0.5)
    obs.heartbeat.add(0.4)
    calc = calculate(obs, 5.0)
    assert calc.initial == 10.0 and calc.heartbeat is None  # 2 intervals < 3
    obs.heartbeat.add(0.3)
    obs.section("ckpt").add(4.0)
    calc = calculate(obs, 5.0)
    assert calc == Calculated(initial=10.0, heartbeat=2.5, sections={"ckpt": 20.0})
    assert calc.names() == frozenset({"initial", "heartbeat", "section:ckpt"})


def test_effective_replaces_only_what_was_calculated() -> None:
    calc = Calculated(heartbeat=2.5, sections={"ckpt": 20.0})
    eff = effective(60.0, 300.0, {"ckpt": 900.0, "step": 30.0}, None, calc)
    assert (eff.heartbeat, eff.initial, eff.out_of_section) == (2.5, 300.0, None)
    assert eff.sections == {"ckpt": 20.0, "step": 30.0}
    assert eff.calculated == frozenset({"heartbeat", "section:ckpt"})
    plain = effective(60.0, 300.0, {}, 7.0, None)
    assert (plain.heartbeat, plain.out_of_section, plain.calculated) == (60.0, 7.0, frozenset())


def test_calculated_timeouts_never_shrink_and_are_stored(tmp_path: Path) -> None:
    said: list[str] = []
    auto = AutoTimeouts(tmp_path, 4.0, said.append)
    rec = auto.recorder(None)
    for v in (1.0, 1.0, 1.0):
        rec.heartbeat.add(v)
    rec.initial.add(3.0)
    assert auto.end_cycle(0) == Calculated(initial=12.0, heartbeat=4.0)
    assert said[-1].endswith("heartbeat 4 s, initial 12 s; used from cycle 1")
    rec = auto.recorder(None)
    rec.heartbeat.add(0.1)  # shorter intervals later: the maximum stays
    assert auto.end_cycle(1) is None and auto.current.heartbeat == 4.0
    stored = json.loads((tmp_path / "calculated_timeouts.json").read_text())
    assert stored["observed"]["heartbeat"] == [1.0, 3]

    again = AutoTimeouts(tmp_path, 4.0, said.append)
    again.recorder(None)  # the first cycle of a re-run loads the stored observations
    assert again.current == Calculated(initial=12.0, heartbeat=4.0)
    assert "earlier run of this job" in said[-1]


def test_unreadable_state_starts_afresh(tmp_path: Path) -> None:
    (tmp_path / "calculated_timeouts.node1.json").write_text("{not json")
    said: list[str] = []
    auto = AutoTimeouts(tmp_path, 5.0, said.append)
    auto.recorder(1)
    assert auto.current is None
    assert said and said[0].startswith("warning: calculated timeouts in ")
    (tmp_path / "calculated_timeouts.node1.json").write_text('{"version": 99}')
    auto = AutoTimeouts(tmp_path, 5.0, said.append)
    auto.recorder(1)
    assert auto.current is None and "not understood" in said[-1]


def test_hostile_stored_values_are_dropped(tmp_path: Path) -> None:
    data = {
        "version": 1,
        "observed": {
            "heartbeat": ["nan", 5],
            "initial": [-3, 1],
            "out_of_section": "x",
            "sections": {"": [1, 1], "ok": [2.0, 1], "bad": [1]},
        },
    }
    (tmp_path / "calculated_timeouts.json").write_text(json.dumps(data))
    auto = AutoTimeouts(tmp_path, 2.0, lambda s: None)
    auto.recorder(None)
    assert auto.current == Calculated(sections={"ok": 4.0})


def test_safety_factor_values() -> None:
    assert safety_factor_value("2.5") == 2.5
    for bad in ("0.5", "abc", "1e9", "nan"):
        try:
            safety_factor_value(bad)
        except ValueError:
            continue
        raise AssertionError(bad)
