"""Rank assignment of the barrier rendezvous (`launcher.rdzv.assignment`): a pure function,
checked on the cases that decide who trains."""

from __future__ import annotations

import random

import pytest

from relaunch.launcher.rdzv.assignment import AssignmentError, Participant, assign


def node(i: int, *, infra: int | None = None, seg: str | None = None, was: bool = False):
    return Participant(f"h{i}:{100 + i}:x", addr=f"h{i}", pid=100 + i, infra_rank=infra,
                       segment=seg, was_active=was)  # fmt: skip


def roles(result) -> dict[str, tuple[int, bool]]:  # type: ignore[no-untyped-def]
    return {a.node_id.split(":")[0]: (a.group_rank, a.active) for a in result}


def test_first_min_nodes_are_active_the_rest_standbys_with_reserved_ranks() -> None:
    ps = [node(i, infra=i) for i in range(4)]
    assert roles(assign(ps, 2)) == {
        "h0": (0, True), "h1": (1, True), "h2": (2, False), "h3": (3, False),
    }  # fmt: skip


def test_the_answer_does_not_depend_on_join_order() -> None:
    ps = [node(i, infra=10 - i) for i in range(6)]
    expected = assign(ps, 3)
    for seed in range(20):
        shuffled = ps[:]
        random.Random(seed).shuffle(shuffled)
        assert assign(shuffled, 3) == expected
    # without infra ranks: the descriptors order them (address, pid)
    plain = [node(i) for i in (3, 1, 2, 0)]
    assert [a.node_id[:2] for a in assign(plain, 4)] == ["h0", "h1", "h2", "h3"]


def test_too_few_nodes_cannot_start_a_round() -> None:
    assert assign([node(0, infra=0)], 2) is None
    assert assign([], 1) is None


def test_returning_active_nodes_are_preferred_over_early_standbys() -> None:
    # h1 failed and is gone; h0 and h3 were active; h2 was a standby with a lower key
    ps = [node(0, infra=0, was=True), node(2, infra=2), node(3, infra=3, was=True)]
    assert roles(assign(ps, 2)) == {"h0": (0, True), "h3": (1, True), "h2": (2, False)}
    # one returning active node: the lowest standby fills the gap, ranks in key order
    ps = [node(0, infra=0, was=True), node(2, infra=2), node(3, infra=3)]
    assert roles(assign(ps, 2)) == {"h0": (0, True), "h2": (1, True), "h3": (2, False)}


def test_duplicate_infra_ranks_are_an_error_naming_both_nodes() -> None:
    with pytest.raises(AssignmentError, match=r"duplicate infra group rank 1: nodes h1.* and h2"):
        assign([node(0, infra=0), node(1, infra=1), node(2, infra=1)], 2)


def test_segments_are_whole_contiguous_and_chosen_by_key() -> None:
    ps = [node(i, infra=i, seg="A" if i < 2 else "B") for i in range(4)]
    assert roles(assign(ps, 2, segment=2)) == {
        "h0": (0, True), "h1": (1, True), "h2": (2, False), "h3": (3, False),
    }  # fmt: skip
    # interleaved infra ranks: the nodes of one segment still get contiguous ranks
    ps = [node(i, infra=i, seg="A" if i % 2 == 0 else "B") for i in range(8)]
    result = roles(assign(ps, 4, segment=2))
    active = sorted((r, n) for n, (r, a) in result.items() if a)
    assert active == [(0, "h0"), (1, "h2"), (2, "h1"), (3, "h3")]


def test_a_segment_that_lost_a_node_is_replaced_whole() -> None:
    # segment A was active and lost h1; B (standbys) becomes active whole; h0 waits
    ps = [node(0, infra=0, seg="A", was=True), node(2, infra=2, seg="B"), node(3, infra=3, seg="B")]
    assert roles(assign(ps, 2, segment=2)) == {"h2": (0, True), "h3": (1, True), "h0": (2, False)}


def test_segments_of_previously_active_nodes_are_kept() -> None:
    # B was active; A has a lower key but consisted of standbys: B stays
    ps = [node(0, infra=0, seg="A"), node(1, infra=1, seg="A"),
          node(2, infra=2, seg="B", was=True), node(3, infra=3, seg="B", was=True)]  # fmt: skip
    assert roles(assign(ps, 2, segment=2))["h2"] == (0, True)


def test_a_domain_too_small_for_a_segment_never_trains() -> None:
    ps = [node(0, infra=0, seg="A"), node(1, infra=1, seg="B"), node(2, infra=2, seg="C")]
    assert assign(ps, 2, segment=2) is None
