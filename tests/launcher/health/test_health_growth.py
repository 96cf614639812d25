"""Counter growth over a sampling window: persistent growth flagged, transients ignored."""

from __future__ import annotations

import pytest

from relaunch.launcher.health.growth import counter_growth, growth_by_key, persistent_keys


def test_flat_counter_is_not_growth() -> None:
    v = counter_growth([5, 5, 5, 5])
    assert not v.persistent
    assert (v.growing_intervals, v.intervals, v.total_growth) == (0, 3, 0)


def test_single_transient_jump_is_ignored() -> None:
    v = counter_growth([0, 40, 40, 40])
    assert not v.persistent
    assert v.growing_intervals == 1
    assert v.total_growth == 40


def test_steady_growth_is_persistent() -> None:
    v = counter_growth([0, 2, 4, 7])
    assert v.persistent
    assert v.growing_intervals == 3
    assert v.total_growth == 7


def test_two_separate_increases_are_persistent() -> None:
    assert counter_growth([1, 2, 2, 3]).persistent


def test_counter_reset_is_not_growth() -> None:
    # Driver reload resets the counter: 100 -> 0 is a reset, 0 -> 1 alone is transient.
    v = counter_growth([100, 0, 1, 1])
    assert not v.persistent
    assert v.growing_intervals == 1


def test_missing_samples_break_intervals() -> None:
    v = counter_growth([0, None, 5, None, 9])
    assert v.intervals == 0
    assert not v.persistent
    v2 = counter_growth([0, 1, None, 2, 3])
    assert v2.intervals == 2 and v2.persistent


def test_too_few_samples() -> None:
    assert not counter_growth([]).persistent
    assert not counter_growth([7]).persistent
    assert counter_growth([7]).intervals == 0


def test_thresholds() -> None:
    samples = [0, 1, 1, 1]
    assert not counter_growth(samples).persistent
    assert counter_growth(samples, min_growing_intervals=1).persistent
    assert not counter_growth([0, 1, 2], min_total_growth=5).persistent
    with pytest.raises(ValueError, match="min_growing_intervals"):
        counter_growth([0, 1], min_growing_intervals=0)


def test_growth_by_key_over_snapshots() -> None:
    snaps = [
        {"link0.replay": 0, "link1.replay": 10, "link2.crc_flit": 3},
        {"link0.replay": 5, "link1.replay": 10, "link2.crc_flit": 4},
        {"link0.replay": 5, "link1.replay": 11, "link2.crc_flit": 6},
        {"link0.replay": 5, "link1.replay": 12},
    ]
    verdicts = growth_by_key(snaps)
    assert list(verdicts) == ["link0.replay", "link1.replay", "link2.crc_flit"]
    assert not verdicts["link0.replay"].persistent  # one jump, then flat
    assert verdicts["link1.replay"].persistent  # rising at the end of the window
    assert verdicts["link2.crc_flit"].persistent  # missing last sample, still 2 rises
    assert persistent_keys(verdicts) == ["link1.replay", "link2.crc_flit"]
    assert verdicts["link1.replay"].to_dict() == {
        "persistent": True,
        "growing_intervals": 2,
        "intervals": 3,
        "total_growth": 2,
    }
