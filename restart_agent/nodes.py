"""One cycle of a multi-node job: every node's log scanned into one `CycleEvidence`.

`NodeScan` feeds the logs of all nodes of a cycle, one node after the other (group rank
order), through one `LogScanner`, so rank attribution, cascades and fan-out
(`ranks_seen`, `failed_ranks`) are those of the whole job: worker lines carry their global
rank (`[rankR]: `), which is the same on every node. Then each piece of evidence gets its
node (`Evidence.node`, when its line did not name a host) and the launcher facts of every
node are put on one timeline: each node's `rank_exit` times count from that node's
`cycle_start` time `t`, so they are shifted by the difference between the node's start and
the earliest start, and the first failing rank is the earliest exit of the whole job. The ranks each node's
`cycle_start` fact says it ran count as seen (`ranks_seen`: the whole world of the cycle,
also the ranks that wrote nothing before they were stopped).

Line numbers of the merged evidence count in the node logs taken in the order they were
fed; `spans()` says which lines belong to which node (`node_of(line)`), and the node-local
line is `line - span.first_line + 1`.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any

from relaunch.restart_agent.budget import AnalysisBudget
from relaunch.restart_agent.facts import PREFIX
from relaunch.restart_agent.model import CycleEvidence, Evidence, LauncherFacts, ProcessExit
from relaunch.restart_agent.scanner import LogScanner

START_FACT = (PREFIX + '{"fact":"cycle_start"').encode()
START_SEARCH_BYTES = 1 << 16  # the launcher writes its cycle_start fact first
MAX_NODE_RANKS = 1 << 16  # ranks of one node's cycle_start fact taken


@dataclass(frozen=True)
class NodeSpan:
    """Where one node's log lies in the merged scan."""

    node: str
    first_line: int  # first line of this node in the merged numbering
    lines: int  # lines of this node's log
    bytes: int
    start_t: float | None  # the node's cycle_start time (epoch seconds), if its log said
    ranks: tuple[int, ...] = ()  # the global ranks its cycle_start fact says it ran

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class NodeScan:
    """Feed node logs one after the other: `start_node(id)`, `feed(bytes)`..., `finish()`."""

    def __init__(self, budget: AnalysisBudget | None = None) -> None:
        self._scanner = LogScanner(budget=budget)  # one budget for the whole cycle
        self._spans: list[NodeSpan] = []
        self._node: str | None = None
        self._newlines = 0  # complete lines fed so far (all nodes)
        self._node_first = 1
        self._node_bytes = 0
        self._head = b""
        self._last = b"\n"

    def start_node(self, node: str) -> None:
        """The bytes fed next are `node`'s log."""
        self._close_node()
        self._node = node
        self._node_first = self._newlines + 1
        self._node_bytes = 0
        self._head = b""

    def feed(self, chunk: bytes) -> None:
        if self._node is None:
            raise ValueError("start_node() first")
        if not chunk:
            return
        if len(self._head) < START_SEARCH_BYTES:
            self._head += chunk[: START_SEARCH_BYTES - len(self._head)]
        self._node_bytes += len(chunk)
        self._newlines += chunk.count(b"\n")
        self._last = chunk[-1:]
        self._scanner.feed(chunk)

    def _close_node(self) -> None:
        if self._node is None:
            return
        start = _start_fact(self._head)
        if self._last != b"\n":  # a last line without newline ends with its node
            self._scanner.feed(b"\n")
            self._newlines += 1
            self._last = b"\n"
        self._spans.append(
            NodeSpan(
                node=self._node,
                first_line=self._node_first,
                lines=self._newlines - self._node_first + 1,
                bytes=self._node_bytes,
                start_t=start[0],
                ranks=start[1],
            )
        )
        self._node = None

    def spans(self) -> list[NodeSpan]:
        return list(self._spans)

    def finish(self) -> CycleEvidence:
        self._close_node()
        return merge_nodes(self._scanner.finish(), self._spans)


def _start_fact(head: bytes) -> tuple[float | None, tuple[int, ...]]:
    """(`t`, `ranks`) of the first cycle_start fact in the head of a node log."""
    at = head.find(START_FACT)
    if at < 0 or (at > 0 and head[at - 1 : at] != b"\n"):
        return None, ()
    end = head.find(b"\n", at)
    raw = head[at + len(PREFIX) : end if end >= 0 else len(head)]
    try:
        obj = json.loads(raw.decode("utf-8", "replace"))
    except ValueError:
        return None, ()
    if not isinstance(obj, dict):
        return None, ()
    t = obj.get("t")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
        t = None
    raw_ranks = obj.get("ranks")
    ranks: tuple[int, ...] = ()
    if isinstance(raw_ranks, list) and len(raw_ranks) <= MAX_NODE_RANKS:
        ranks = tuple(
            r
            for r in raw_ranks
            if isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 2**31
        )
    return (None if t is None else float(t)), ranks


def node_of(spans: list[NodeSpan], line: int) -> NodeSpan | None:
    """The span holding merged line `line` (None: outside every span)."""
    starts = [s.first_line for s in spans]
    i = bisect.bisect_right(starts, line) - 1
    if i < 0:
        return None
    span = spans[i]
    return span if line < span.first_line + max(span.lines, 1) else None


def merge_nodes(evidence: CycleEvidence, spans: list[NodeSpan]) -> CycleEvidence:
    """Give each piece of evidence its node and put the launcher facts on one timeline."""
    if not spans:
        return evidence

    def tag(e: Evidence) -> Evidence:
        if e.node:
            return e
        span = node_of(spans, e.line)
        return e if span is None else dataclasses.replace(e, node=span.node)

    nodes = sorted(set(evidence.nodes) | {s.node for s in spans})
    ran = {r for s in spans for r in s.ranks}
    return dataclasses.replace(
        evidence,
        ranks_seen=sorted(set(evidence.ranks_seen) | ran),
        primary=None if evidence.primary is None else tag(evidence.primary),
        roots=[tag(e) for e in evidence.roots],
        diagnostics=[tag(e) for e in evidence.diagnostics],
        cascade_evidence=[tag(e) for e in evidence.cascade_evidence],
        nodes=nodes,
        launcher=_one_timeline(evidence.launcher, spans),
    )


def _one_timeline(facts: LauncherFacts | None, spans: list[NodeSpan]) -> LauncherFacts | None:
    """Shift each node's exit times by its start's offset from the earliest node start;
    the first failing rank is then the earliest exit of the job."""
    if facts is None:
        return None
    starts = [s.start_t for s in spans if s.start_t is not None]
    t0 = min(starts) if starts else None

    def shifted(e: ProcessExit) -> ProcessExit:
        span = node_of(spans, e.line)
        node = e.node or (span.node if span is not None else None)
        t_s = e.t_s
        if t_s is not None and span is not None and span.start_t is not None and t0 is not None:
            t_s = round(t_s + (span.start_t - t0), 6)
        return dataclasses.replace(e, node=node, t_s=t_s)

    exits = [shifted(e) for e in facts.exits]
    firsts = [e for e in exits if e.first and e.exitcode != 0 and e.source == "launcher"]
    firsts.sort(key=lambda e: (e.t_s if e.t_s is not None else math.inf, e.line))
    first = firsts[0].rank if firsts else facts.first_failing_rank
    return dataclasses.replace(facts, exits=exits, first_failing_rank=first)
