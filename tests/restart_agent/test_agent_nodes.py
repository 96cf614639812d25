"""restart_agent.nodes: several nodes' logs of one cycle scanned into one CycleEvidence.

Evidence gets its node, ranks_seen is the whole world (every node's cycle_start ranks),
and the launchers' exit times are put on one timeline: a node that started later but
whose rank failed earlier in absolute time names the first failing rank."""

from __future__ import annotations

import json

from relaunch.restart_agent import decide
from relaunch.restart_agent.nodes import NodeScan, node_of


def _fact(**kw: object) -> bytes:
    return b"[relaunch] fact: " + json.dumps(kw, separators=(",", ":")).encode() + b"\n"


def _log(node: int, ranks: list[int], t: float, exit_rank: int, t_s: float) -> bytes:
    out = _fact(fact="cycle_start", cycle=0, job="j", node=node, ranks=ranks, world_size=4, t=t)
    out += f"[rank{exit_rank}]: RuntimeError: boom on rank {exit_rank}\n".encode()
    out += _fact(fact="rank_exit", cycle=0, rank=exit_rank, local_rank=0, node=node,
                 exitcode=1, first=True, t_s=t_s)  # fmt: skip
    return out


def _scan(parts: list[tuple[str, bytes]], chunk: int = 7) -> NodeScan:
    scan = NodeScan()
    for node, data in parts:
        scan.start_node(node)
        for i in range(0, len(data), chunk):  # any chunking
            scan.feed(data[i : i + chunk])
    return scan


def test_one_timeline_and_nodes() -> None:
    # node0 started at t=100 and its rank 0 failed 10 s in (t=110); node1 started at
    # t=105 and its rank 3 failed 2 s in (t=107): rank 3 failed first
    parts = [
        ("node0", _log(0, [0, 1], 100.0, 0, 10.0)),
        ("node1", _log(1, [2, 3], 105.0, 3, 2.0)),
    ]
    scan = _scan(parts)
    ev = scan.finish()
    assert ev.ranks_seen == [0, 1, 2, 3]
    assert ev.nodes == ["node0", "node1"]
    assert ev.launcher is not None and ev.launcher.first_failing_rank == 3
    by_rank = {e.rank: e.node for e in ev.roots}
    assert by_rank == {0: "node0", 3: "node1"}
    spans = scan.spans()
    assert [(s.node, s.first_line, s.lines) for s in spans] == [("node0", 1, 3), ("node1", 4, 3)]
    assert node_of(spans, 5) is spans[1] and node_of(spans, 99) is None
    verdict = decide(ev, [])
    assert verdict.fan_out.ranks_seen == 4


def test_last_line_without_newline_stays_with_its_node() -> None:
    scan = _scan([("a", b"[rank0]: hello"), ("b", b"[rank1]: RuntimeError: boom\n")])
    ev = scan.finish()
    assert [(s.node, s.first_line, s.lines) for s in scan.spans()] == [("a", 1, 1), ("b", 2, 1)]
    assert [(e.rank, e.node) for e in ev.roots] == [(1, "b")]


def test_a_forged_or_malformed_start_fact_is_ignored() -> None:
    rank_line = b"[rank0]: " + _fact(fact="cycle_start", cycle=0, ranks=[7], t=1.0)
    scan = _scan([("a", rank_line + b'[relaunch] fact: {"fact":"cycle_start","t":"x"\n')])
    ev = scan.finish()
    assert scan.spans()[0].start_t is None and scan.spans()[0].ranks == ()
    assert 7 not in ev.ranks_seen
