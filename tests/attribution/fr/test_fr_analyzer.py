"""Flight Recorder analyzer: stalls, culprits vs victims, p2p, coalesced, several groups."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from relaunch.attribution.fr import analyze_paths, culprit_ranks, render_text
from tests._fr_helpers import (
    Call,
    Group,
    job_dumps,
    real_dumps_dir,
    stalled_allreduce_job,
    write_dumps,
)


def _analyze(tmp_path: Path, dumps: dict[int, dict[str, Any]]) -> dict[str, Any]:
    write_dumps(dumps, tmp_path)
    return analyze_paths([tmp_path])


def _group(result: dict[str, Any], gid: str) -> dict[str, Any]:
    return next(g for g in result["groups"] if g["id"] == gid)


@pytest.mark.parametrize("name", ["gpu_error_2nd", "lock_gil_1st"])
def test_real_nccl_sets_name_exactly_the_fault_ranks(name: str) -> None:
    result = analyze_paths([real_dumps_dir(name)])
    assert culprit_ranks(result) == [9, 14]
    assert result["missing_ranks"] == [] and result["unreadable"] == []
    tp = _group(result, "37")
    assert tp["description"] == "TENSOR_MODEL_PARALLEL_GROUP"
    assert tp["ranks"] == [8, 9, 10, 11]
    assert tp["lagging_ranks"] == [9] and tp["culprit_ranks"] == [9]
    assert tp["stalled_op"]["type"] == "_reduce_scatter_base"
    assert tp["stalled_op"]["sizes"] == [[8192, 1, 5120]]
    assert tp["stalled_op"]["dtype"] == "BFloat16"
    assert _group(result, "38")["lagging_ranks"] == [14]


def test_lock_gil_default_group_lists_victims_as_blocked_elsewhere() -> None:
    result = analyze_paths([real_dumps_dir("lock_gil_1st")])
    g0 = _group(result, "0")
    # Ranks 0-7 wait in recvs from 8-15; 8-15 never posted the sends because they are
    # themselves stuck in tensor-parallel groups waiting on 9 and 14.
    assert g0["waiting_ranks"] == list(range(8))
    assert g0["lagging_ranks"] == list(range(8, 16))
    assert g0["culprit_ranks"] == [9, 14]
    assert g0["blocked_elsewhere"] == [8, 10, 11, 12, 13, 15]
    assert g0["stalled_op"]["type"] == "recv" and g0["stalled_op"]["is_p2p"] is True


def test_gpu_error_rank_that_stopped_completing_is_reported() -> None:
    result = analyze_paths([real_dumps_dir("gpu_error_2nd")])
    c9 = next(c for c in result["culprits"] if c["rank"] == 9)
    assert {g["how"] for g in c9["groups"]} == {"never reached", "did not complete"}


def test_single_allreduce_stall(tmp_path: Path) -> None:
    result = _analyze(tmp_path, stalled_allreduce_job(8, culprits=[3]))
    assert result["culprit_ranks"] == [3]
    [g] = result["groups"]
    assert g["id"] == "0" and g["description"] == "default_pg" and g["ranks"] == list(range(8))
    assert g["stalled_op"] == {
        **g["stalled_op"],
        "type": "all_reduce",
        "sizes": [[1024]],
        "dtype": "Float",
        "seq_id": 5,
    }
    assert g["waiting_ranks"] == [0, 1, 2, 4, 5, 6, 7]
    assert g["lag"] == {"3": "never reached"}


def test_missing_dump_counts_as_culprit(tmp_path: Path) -> None:
    result = _analyze(tmp_path, stalled_allreduce_job(6, culprits=[], missing=[4]))
    # Everyone with a dump entered op 5 and none completed it; rank 4 has no dump.
    assert result["culprit_ranks"] == [4]
    assert result["missing_ranks"] == [4]
    assert _group(result, "0")["lag"] == {"4": "no dump"}


def test_chain_victim_is_not_a_culprit(tmp_path: Path) -> None:
    """Rank 1 never joins group A's all-reduce; rank 2 waits in it; rank 3 waits for 2 in B."""
    ga = Group("1", "A", [1, 2])
    gb = Group("2", "B", [2, 3])
    world = Group("0", "default_pg", [0, 1, 2, 3])
    prog = {
        0: [Call("0")],
        1: [Call("0"), Call("1")],
        2: [Call("0"), Call("1"), Call("2")],
        3: [Call("0"), Call("2")],
    }
    reached = {0: 1, 1: 1, 2: 2, 3: 2}  # 1 stops before A; 2 stuck in A; 3 stuck in B
    completed = {0: 1, 1: 1, 2: 1, 3: 1}
    result = _analyze(tmp_path, job_dumps([world, ga, gb], prog, reached, completed))
    assert result["culprit_ranks"] == [1]
    assert _group(result, "1")["culprit_ranks"] == [1]
    b = _group(result, "2")
    assert b["lagging_ranks"] == [2] and b["blocked_elsewhere"] == [2] and b["culprit_ranks"] == []


def test_several_groups_stalled_at_once(tmp_path: Path) -> None:
    groups = [
        Group("0", "default_pg", [0, 1, 2, 3]),
        Group("1", "TP", [0, 1]),
        Group("2", "TP", [2, 3]),
    ]
    prog = {
        r: [Call("0"), Call("1" if r < 2 else "2", "_all_gather_base", [[16]], "Long")]
        for r in range(4)
    }
    reached = {0: 2, 1: 1, 2: 1, 3: 2}
    completed = dict.fromkeys(range(4), 1)
    result = _analyze(tmp_path, job_dumps(groups, prog, reached, completed))
    assert result["culprit_ranks"] == [1, 2]
    assert [g["id"] for g in result["groups"]] == ["1", "2"]
    assert _group(result, "1")["lagging_ranks"] == [1]
    assert _group(result, "2")["lagging_ranks"] == [2]
    assert _group(result, "2")["stalled_op"]["dtype"] == "Long"


def test_p2p_blames_only_the_peer(tmp_path: Path) -> None:
    """Rank 0 sends to 1 on the default group; 1 never posts the recv. Ranks 2, 3 are idle
    members of the same group and must not be blamed."""
    world = Group("0", "default_pg", [0, 1, 2, 3])
    steps = [Call("0")] * 3
    prog = {
        0: [*steps, Call("0", "send", [[2048, 5120]], "BFloat16", peer=1)],
        1: [*steps, Call("0", "recv", [[2048, 5120]], "BFloat16", peer=0)],
        2: steps,
        3: steps,
    }
    reached = {0: 4, 1: 3, 2: 3, 3: 3}
    completed = dict.fromkeys(range(4), 3)
    result = _analyze(tmp_path, job_dumps([world], prog, reached, completed))
    assert result["culprit_ranks"] == [1]
    g = _group(result, "0")
    assert g["stalled_op"]["type"] == "send" and g["stalled_op"]["is_p2p"] is True
    assert g["stalled_op"]["seq_id"] == 1  # the p2p sequence id
    assert g["lagging_ranks"] == [1]


def test_p2p_both_posted_is_in_flight_not_blamed(tmp_path: Path) -> None:
    pp = Group("1", "PIPELINE", [0, 1])
    prog = {0: [Call("1", "send", peer=1)], 1: [Call("1", "recv", peer=0)]}
    result = _analyze(tmp_path, job_dumps([pp], prog, {0: 1, 1: 1}, {0: 0, 1: 0}))
    assert result["culprit_ranks"] == []
    [g] = result["groups"]
    assert g["state"] == "in_flight" and g["lagging_ranks"] == []


def test_coalesced_op(tmp_path: Path) -> None:
    g = Group("0", "default_pg", [0, 1, 2])
    op = Call("0", "all_reduce", [[4], [8]], "Float", coalesced=3)
    prog = dict.fromkeys(range(3), [Call("0"), op])
    result = _analyze(
        tmp_path, job_dumps([g], prog, {0: 2, 1: 2, 2: 1}, dict.fromkeys(range(3), 1))
    )
    assert result["culprit_ranks"] == [2]
    s = result["groups"][0]["stalled_op"]
    assert s["type"] == "coalesced" and len(s["coalesced"]) == 3
    assert s["sizes"] == [[4], [8]] * 3


def test_deadlock_cycle_names_both(tmp_path: Path) -> None:
    """0 enters A then B; 1 enters B then A (wrong order): each waits for the other."""
    ga, gb = Group("1", "A", [0, 1]), Group("2", "B", [0, 1])
    prog = {0: [Call("1"), Call("2")], 1: [Call("2"), Call("1")]}
    result = _analyze(tmp_path, job_dumps([ga, gb], prog, {0: 1, 1: 1}, {0: 0, 1: 0}))
    assert result["culprit_ranks"] == [0, 1]
    assert {g["id"] for g in result["groups"]} == {"1", "2"}


def test_healthy_set_has_no_culprits(tmp_path: Path) -> None:
    dumps = stalled_allreduce_job(4, culprits=[])
    for d in dumps.values():
        d["pg_status"]["0"]["last_completed_collective"] = 5
    result = _analyze(tmp_path, dumps)
    assert result["culprit_ranks"] == [] and result["groups"] == []
    assert result["summary"].startswith("no stalled process group")


def test_everyone_inside_the_op_names_nobody(tmp_path: Path) -> None:
    result = _analyze(tmp_path, stalled_allreduce_job(4, culprits=[]))
    assert result["culprit_ranks"] == []
    [g] = result["groups"]
    assert g["state"] == "in_flight" and g["waiting_ranks"] == [0, 1, 2, 3]


def test_start_times_name_the_rank_that_never_started(tmp_path: Path) -> None:
    g = Group("0", "default_pg", [0, 1, 2])
    prog = dict.fromkeys(range(3), [Call("0"), Call("0")])
    dumps = {
        r: job_dumps([g], {r: prog[r]}, {r: 2}, {r: 1}, started=2 if r != 2 else 1)[r]
        for r in range(3)
    }
    result = _analyze(tmp_path, dumps)
    assert result["culprit_ranks"] == [2]
    assert result["groups"][0]["lag"] == {"2": "never started"}


def test_rank_that_stops_completing_alone(tmp_path: Path) -> None:
    g = Group("0", "default_pg", [0, 1, 2, 3])
    prog = dict.fromkeys(range(4), [Call("0")] * 4)
    completed = {0: 4, 1: 4, 2: 1, 3: 4}  # 2's own work stops completing (device fault)
    result = _analyze(tmp_path, job_dumps([g], prog, dict.fromkeys(range(4), 4), completed))
    assert result["culprit_ranks"] == [2]
    [grp] = result["groups"]
    assert grp["kind"] == "not completing" and grp["lag"] == {"2": "did not complete"}
    assert grp["stalled_op"]["seq_id"] == 2


def test_collective_mismatch_is_reported(tmp_path: Path) -> None:
    g = Group("0", "default_pg", [0, 1, 2])
    progs = {r: [Call("0", "all_reduce", [[4 if r != 1 else 6]])] * 2 for r in range(3)}
    result = _analyze(
        tmp_path, job_dumps([g], progs, {0: 2, 1: 2, 2: 1}, dict.fromkeys(range(3), 1))
    )
    assert result["culprit_ranks"] == [2]
    mm = result["groups"][0]["mismatch"]
    assert [m["rank"] for m in mm] == [0, 1] and mm[1]["sizes"] == [[6]]


def test_gloo_style_op_id_status_and_empty_pg_config(tmp_path: Path) -> None:
    """gloo (2.10) counts pg_status in op ids and writes pg_config {'': ...}; members are then
    inferred from the dumps themselves."""
    g = Group("0", "default_pg", [0, 1, 2])
    prog = dict.fromkeys(range(3), [Call("0")] * 3)
    dumps = job_dumps([g], prog, {0: 3, 1: 3, 2: 2}, dict.fromkeys(range(3), 2), version="2.10")
    for d in dumps.values():
        d["pg_config"] = {"": {"desc": "", "name": "", "ranks": "[]"}}
        for e in d["entries"]:
            e["op_id"] += 10  # op ids run ahead of collective seq ids (unrecorded p2p)
        st = d["pg_status"]["0"]
        st["last_enqueued_collective"] += 10
        st["last_completed_collective"] += 10
    result = _analyze(tmp_path, dumps)
    assert result["culprit_ranks"] == [2]
    [grp] = result["groups"]
    assert grp["members_inferred"] is True
    assert grp["stalled_op"]["seq_id"] == 3 and grp["stalled_op"]["status_seq"] == 13


def test_text_rendering(tmp_path: Path) -> None:
    text = render_text(_analyze(tmp_path, stalled_allreduce_job(8, culprits=[3, 4, 5])))
    assert "culprit ranks: 3-5" in text
    assert "group 0 default_pg (8 ranks) stalled: all_reduce seq 5 sizes [[1024]] Float" in text


def test_world_group_waiters_behind_a_tensor_parallel_stall(tmp_path: Path) -> None:
    """16 ranks, TP groups of 4. Rank 5 never reaches its TP reduce-scatter; 4, 6, 7 wait in
    it; the 12 others move on and wait in a world all-reduce that 4-7 never reach."""
    world = Group("0", "default_pg", list(range(16)))
    tps = [
        Group(str(1 + i), "TENSOR_MODEL_PARALLEL_GROUP", list(range(4 * i, 4 * i + 4)))
        for i in range(4)
    ]
    prog = {
        r: [Call(str(1 + r // 4), "_reduce_scatter_base", [[8, 4]], "BFloat16"), Call("0")]
        for r in range(16)
    }
    reached = {r: 0 if r == 5 else 1 if 4 <= r < 8 else 2 for r in range(16)}
    completed = {r: 0 if 4 <= r < 8 else 1 for r in range(16)}
    result = _analyze(tmp_path, job_dumps([world, *tps], prog, reached, completed))
    assert result["culprit_ranks"] == [5]
    g0 = _group(result, "0")
    assert g0["waiting_ranks"] == [0, 1, 2, 3, *range(8, 16)]
    assert g0["lagging_ranks"] == [4, 5, 6, 7]
    assert g0["culprit_ranks"] == [5] and g0["blocked_elsewhere"] == [4, 6, 7]
    assert _group(result, "2")["lag"] == {"5": "never reached"}
    assert result["in_flight_groups"] == []


def test_public_api_shapes(tmp_path: Path) -> None:
    write_dumps(stalled_allreduce_job(3, culprits=[2]), tmp_path)
    result = analyze_paths(str(tmp_path))  # one path as a plain string is accepted too
    assert culprit_ranks(result) == [2]
    assert culprit_ranks({"culprit_ranks": ["7", 3]}) == [3, 7]
    assert culprit_ranks({}) == []
    import json

    assert json.loads(json.dumps(result)) == result  # JSON-ready: no tuples, no objects
