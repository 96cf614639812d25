"""Find where process groups stalled and which ranks caused it, from a set of rank dumps.

Owns the cross-rank analysis. Per process group it compares every member's last
enqueued / started / completed sequence numbers and pending entries:

- a *waiter* is a member with work enqueued but not completed; it waits in op `completed+1`;
- a waiter waits *for* the members that never reached that op (their enqueued seq is lower),
  that never started it while others did (when start times were recorded), or whose dump is
  missing; for a send/recv only the peer counts;
- a waiter whose op every other member already completed is *stuck alone* (its own device or
  process stopped completing work).

These "waits for" links form a graph over ranks. Ranks that others wait for but that wait
for nobody themselves (or that wait for each other in a cycle: a deadlock) are the culprits;
a rank that lags in one group because it is itself blocked in another is a victim, not a
culprit. Several groups stalled at once are each reported.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from relaunch.attribution.fr.reader import DumpSet, GroupState, Op, RankDump, RanksKey, parse_ranks


def _group_members(
    dumps: dict[int, RankDump],
) -> tuple[dict[str, tuple[int, ...]], dict[str, str], set[str], list[str]]:
    """Member ranks and description of every group, from the pg_config of all dumps.

    Groups no pg_config lists (gloo writes an empty one) get the ranks whose dumps show
    them as members (`inferred`). Disagreeing member lists are reported as conflicts.
    """
    votes: dict[str, Counter[RanksKey]] = {}
    descs: dict[str, str] = {}
    seen_in: dict[str, set[int]] = {}
    for rank, d in dumps.items():
        for name, (desc, ranks) in d.pg_config.items():
            if desc:
                descs.setdefault(name, desc)
            if ranks:
                votes.setdefault(name, Counter())[ranks] += 1
        for name, gs in d.groups.items():
            if gs.desc:
                descs.setdefault(name, gs.desc)
            seen_in.setdefault(name, set()).add(rank)
    members: dict[str, tuple[int, ...]] = {}
    conflicts: list[str] = []
    for name, c in votes.items():
        parsed: dict[tuple[int, ...], int] = {}
        for key, n in c.items():  # '[0, 1]' and '[0,1]' are the same members
            ranks = parse_ranks(key)
            if ranks:
                parsed[ranks] = parsed.get(ranks, 0) + n
        if not parsed:
            continue
        members[name] = max(parsed.items(), key=lambda kv: kv[1])[0]
        if len(parsed) > 1:
            conflicts.append(name)
    inferred: set[str] = set()
    for name, seen in seen_in.items():
        if name not in members:
            members[name] = tuple(sorted(seen))
            inferred.add(name)
    return members, descs, inferred, sorted(conflicts, key=_name_key)


def _name_key(name: str) -> tuple[int, int, str]:
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def _known(gs: GroupState | None) -> bool:
    return gs is not None and bool(gs.enqueued)


def _frontier(gs: GroupState, values: dict[str, int], ch: str) -> int | None:
    """A rank's seq in channel `ch` ("?" = the channel of its last work); 0 when its dump
    holds its whole history and shows no work of that kind; None when unknown."""
    if ch in values:
        return values[ch]
    if "?" in values:
        return values["?"]
    if ch == "?":
        return values.get(gs.last_channel)
    return 0 if gs.complete else None


def _op_at(gs: GroupState, at: tuple[str, int]) -> Op | None:
    for op in gs.pending:
        if (op.channel, op.seq) == at:
            return op
    return None


def _peers(op: Op | None, rank: int, members: tuple[int, ...]) -> set[int]:
    """Global ranks of a send/recv's peers (profiling names carry group-local ranks)."""
    if op is None or not op.is_p2p or not op.peers:
        return set()
    out: set[int] = set()
    for me, peer in op.peers:
        if me < len(members) and members[me] == rank and peer < len(members):
            out.add(members[peer])
        elif me == rank:
            out.add(peer)
    return out


def _has_p2p_towards(gs: GroupState | None, peer: int, members: tuple[int, ...]) -> bool:
    if gs is None:
        return False
    for op in gs.pending:
        if op.is_p2p:
            for _me, other in op.peers:
                glob = members[other] if other < len(members) else other
                if glob == peer:
                    return True
    return False


def describe_op(op: Op | None, seq: int) -> dict[str, Any]:
    """The JSON description of a stalled op."""
    if op is None:
        return {"type": "unknown", "sizes": [], "dtype": None, "seq_id": seq, "status_seq": seq}
    dtypes = list(dict.fromkeys(op.dtypes))
    seq_id = op.p2p_seq_id if op.is_p2p else op.collective_seq_id
    out: dict[str, Any] = {
        "type": op.type,
        "sizes": op.input_sizes,
        "output_sizes": op.output_sizes,
        "dtype": ",".join(dtypes) if dtypes else None,
        "seq_id": seq_id if seq_id is not None else seq,
        "status_seq": seq,
        "op_id": op.op_id,
        "is_p2p": op.is_p2p,
        "profiling_name": op.names[0] if op.names else "",
    }
    if len(op.names) > 1:
        out["coalesced"] = op.names
    return out


class _Graph:
    """Waits-for graph; one virtual node per (group, target set) keeps edges linear."""

    def __init__(self) -> None:
        self.out: dict[Any, set[Any]] = {}

    def node(self, n: Any) -> None:
        self.out.setdefault(n, set())

    def edge(self, a: Any, b: Any) -> None:
        self.out.setdefault(a, set()).add(b)
        self.out.setdefault(b, set())

    def terminal_components(self) -> list[tuple[list[Any], bool]]:
        """(members, has incoming edge from outside) of each SCC with no way out (Tarjan)."""
        index: dict[Any, int] = {}
        low: dict[Any, int] = {}
        comp: dict[Any, int] = {}
        stack: list[Any] = []
        on: set[Any] = set()
        comps: list[list[Any]] = []
        counter = 0
        for root in self.out:
            if root in index:
                continue
            work = [(root, iter(self.out[root]))]
            index[root] = low[root] = counter
            counter += 1
            stack.append(root)
            on.add(root)
            while work:
                v, it = work[-1]
                pushed = False
                for w in it:
                    if w not in index:
                        index[w] = low[w] = counter
                        counter += 1
                        stack.append(w)
                        on.add(w)
                        work.append((w, iter(self.out[w])))
                        pushed = True
                        break
                    if w in on:
                        low[v] = min(low[v], index[w])
                if pushed:
                    continue
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    members = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp[x] = len(comps)
                        members.append(x)
                        if x == v:
                            break
                    comps.append(members)
        leaves_out = [False] * len(comps)
        has_in = [False] * len(comps)
        for a, outs in self.out.items():
            for b in outs:
                if comp[a] != comp[b]:
                    leaves_out[comp[a]] = True
                    has_in[comp[b]] = True
        return [(m, has_in[i]) for i, m in enumerate(comps) if not leaves_out[i]]


def _analyze_group(
    name: str,
    members: tuple[int, ...],
    dumps: dict[int, RankDump],
    nodata: set[int],
) -> dict[str, Any] | None:
    """Stall findings of one group, or None when the group shows nothing pending."""
    states = {r: dumps[r].groups.get(name) for r in members if r in dumps}
    known = {r: gs for r, gs in states.items() if gs is not None and _known(gs)}
    missing = [r for r in members if r in nodata]
    waiters: dict[int, tuple[int, Op | None, list[int], str]] = {}
    stuck_alone: dict[int, tuple[int, Op | None]] = {}
    # Waiters at the same (channel, seq) of a collective share their answers: compute each
    # once, so a world group where thousands of ranks wait stays linear in ranks.
    member_set = set(members)
    behind_cache: dict[tuple[str, int], list[int]] = {}
    unstarted_cache: dict[tuple[str, int], list[int]] = {}
    done_cache: dict[tuple[str, int], int] = {}

    def behind(ch: str, w: int) -> list[int]:
        if (ch, w) not in behind_cache:
            out = []
            for q in members:
                if q in nodata:
                    out.append(q)
                elif q in known:
                    e_q = _frontier(known[q], known[q].enqueued, ch)
                    if e_q is not None and e_q < w:
                        out.append(q)
            behind_cache[(ch, w)] = out
        return behind_cache[(ch, w)]

    def unstarted(ch: str, w: int) -> list[int]:
        if (ch, w) not in unstarted_cache:
            out = []
            for q, qs in known.items():
                s_q = _frontier(qs, qs.started, ch)
                if s_q is not None and s_q < w:
                    out.append(q)
            unstarted_cache[(ch, w)] = sorted(out)
        return unstarted_cache[(ch, w)]

    def completed_count(ch: str, w: int) -> int:
        if (ch, w) not in done_cache:
            done_cache[(ch, w)] = sum(
                1
                for qs in known.values()
                if (c := _frontier(qs, qs.completed, ch)) is not None and c >= w
            )
        return done_cache[(ch, w)]

    for r, gs in known.items():
        if gs.stalled_at is None:
            continue
        ch, w = gs.stalled_at
        op = _op_at(gs, gs.stalled_at)
        peers = _peers(op, r, members) & member_set
        how = "never reached"
        if peers:
            targets = []
            for q in sorted(peers):
                qs = known.get(q)
                if q in nodata:
                    targets.append(q)
                elif qs is not None:
                    e_q = _frontier(qs, qs.enqueued, ch)
                    if e_q is not None and e_q < w and not _has_p2p_towards(qs, r, members):
                        targets.append(q)
        else:
            targets = [q for q in behind(ch, w) if q != r]
        if not targets:
            # Everyone reached it: with start times, those that never started it lag.
            s_r = _frontier(gs, gs.started, ch)
            if s_r is not None and s_r >= w:
                lag = unstarted(ch, w)
                targets = [q for q in lag if q != r and (not peers or q in peers)]
                how = "never started"
        if targets:
            waiters[r] = (w, op, targets, how)
            continue
        if peers:
            others = [known[q] for q in peers if q in known]
            alone = bool(others) and all(
                (c := _frontier(o, o.completed, ch)) is not None and c >= w for o in others
            )
        else:
            mine = _frontier(gs, gs.completed, ch)
            n_done = completed_count(ch, w) - (1 if mine is not None and mine >= w else 0)
            alone = len(known) > 1 and n_done == len(known) - 1
        if alone:
            stuck_alone[r] = (w, op)
        else:
            waiters[r] = (w, op, [], "in flight")
    if not waiters and not stuck_alone:
        waiters = _gave_up(members, known)
    if not waiters and not stuck_alone:
        return None
    genuine = {r: v for r, v in waiters.items() if v[2]}
    if genuine:
        stall_seq = min(v[0] for v in genuine.values())
        at = [r for r, v in genuine.items() if v[0] == stall_seq]
        op = next((genuine[r][1] for r in at if genuine[r][1] is not None), None)
        kind = "waiting"
    elif stuck_alone:
        stall_seq = min(v[0] for v in stuck_alone.values())
        at = [r for r, v in stuck_alone.items() if v[0] == stall_seq]
        op = next((stuck_alone[r][1] for r in at if stuck_alone[r][1] is not None), None)
        kind = "not completing"
    else:
        stall_seq = min(v[0] for v in waiters.values())
        at = [r for r, v in waiters.items() if v[0] == stall_seq]
        op = next((waiters[r][1] for r in at if waiters[r][1] is not None), None)
        kind = "in flight"
    lag_how: dict[int, str] = {}
    for _w, _op, targets, how in genuine.values():
        for q in targets:
            lag_how.setdefault(q, "no dump" if q in nodata else how)
    for r in stuck_alone:
        lag_how.setdefault(r, "did not complete")
    sigs = {r: w_op.signature() for r in at if r in waiters and (w_op := waiters[r][1])}
    mismatch: list[dict[str, Any]] = []
    if len(set(sigs.values())) > 1:
        for r in sorted(sigs):
            o = waiters[r][1]
            assert o is not None
            mismatch.append({"rank": r, "type": o.type, "sizes": o.input_sizes, "dtype": o.dtypes})
    return {
        "id": name,
        "ranks": list(members),
        "state": "stalled" if lag_how else "in_flight",
        "kind": kind,
        "stalled_op": describe_op(op, stall_seq),
        "waiting_ranks": sorted(waiters),
        "lagging_ranks": sorted(lag_how),
        "lag": {str(r): h for r, h in sorted(lag_how.items())},
        "missing_ranks": missing,
        "unknown_ranks": sorted(r for r in states if r not in known),
        "mismatch": mismatch,
        "_edges": {r: v[2] for r, v in genuine.items()},
        "_stuck": sorted(stuck_alone),
    }


def _gave_up(
    members: tuple[int, ...], known: dict[int, GroupState]
) -> dict[int, tuple[int, Op | None, list[int], str]]:
    """Members that *completed* a collective another member never enqueued: such a
    completion can only be a failure (gloo marks an op that timed out completed and raises
    in the worker; its dump, taken then, shows nothing pending). Each is a waiter at the
    first op a lagging member never reached; the lagging members are its targets. Asked
    only when the group shows no other stall; a member without a dump is never a target
    here (a missing dump alone proves nothing about a completed op)."""
    out: dict[int, tuple[int, Op | None, list[int], str]] = {}
    for r, gs in known.items():
        for ch, c_r in gs.completed.items():
            if c_r < 0:
                continue
            lag: dict[int, int] = {}
            for q, qs in known.items():
                e_q = _frontier(qs, qs.enqueued, ch)
                if q != r and e_q is not None and e_q < c_r:
                    lag[q] = e_q
            if not lag:
                continue
            w = min(lag.values()) + 1
            op = _op_at(gs, (ch, w))
            if _peers(op, r, members):
                continue  # a send/recv: only its peer counts, and the peer is not lagging here
            targets = sorted(q for q, e in lag.items() if e < w)
            if r not in out or w < out[r][0]:
                out[r] = (w, op, targets, "never reached (a peer's op failed)")
    return out


def analyze(ds: DumpSet) -> dict[str, Any]:
    """The analysis result (JSON-ready dict) of one dump set."""
    dumps = ds.dumps
    members, descs, inferred, conflicts = _group_members(dumps)
    unreadable_ranks = {p.rank for p in ds.problems if p.rank is not None} - set(dumps)
    expected: set[int] = set(dumps) | unreadable_ranks
    for ranks in members.values():
        expected.update(ranks)
    no_file = sorted(expected - set(dumps) - unreadable_ranks)
    nodata = set(no_file) | unreadable_ranks

    graph = _Graph()
    for r in expected:
        graph.node(("rank", r))
    stalled: list[dict[str, Any]] = []
    in_flight: list[dict[str, Any]] = []
    stuck_ranks: set[int] = set()
    waited_by: dict[int, set[int]] = {}
    for name in sorted(members, key=_name_key):
        ranks = members[name]
        if len(ranks) < 2:
            continue
        g = _analyze_group(name, ranks, dumps, nodata)
        if g is None:
            continue
        g["description"] = descs.get(name, "")
        g["members_inferred"] = name in inferred
        edges = g.pop("_edges")
        stuck_ranks.update(g.pop("_stuck"))
        by_targets: dict[tuple[int, ...], list[int]] = {}
        for r, targets in edges.items():
            for q in targets:
                waited_by.setdefault(q, set()).add(r)
            by_targets.setdefault(tuple(targets), []).append(r)
        for i, (targets, waiters) in enumerate(by_targets.items()):
            v = ("group", name, i)
            for r in waiters:
                graph.edge(("rank", r), v)
            for q in targets:
                graph.edge(v, ("rank", q))
        (stalled if g["state"] == "stalled" else in_flight).append(g)

    culprits: set[int] = set()
    for comp, has_in in graph.terminal_components():
        ranks_in = [n[1] for n in comp if n[0] == "rank"]
        if has_in or len(comp) > 1:
            culprits.update(ranks_in)
        else:
            culprits.update(r for r in ranks_in if r in stuck_ranks)

    for g in stalled + in_flight:
        lag = g["lagging_ranks"]
        g["culprit_ranks"] = [r for r in lag if r in culprits]
        g["blocked_elsewhere"] = [r for r in lag if r not in culprits]
    groups = stalled if stalled else in_flight
    reasons = _culprit_reasons(culprits, stalled, nodata, waited_by)
    versions = sorted({d.version for d in dumps.values() if d.version})
    return {
        "culprit_ranks": sorted(culprits),
        "culprits_without_dump": sorted(culprits & nodata),
        "culprits": reasons,
        "groups": [_public(g) for g in groups],
        "in_flight_groups": [g["id"] for g in in_flight] if stalled else [],
        "world_size": len(expected),
        "ranks_read": len(dumps),
        "missing_ranks": no_file,
        "unreadable": [
            {"path": p.path, "rank": p.rank, "error": p.error}
            for p in sorted(ds.problems, key=lambda p: (p.rank is None, p.rank or 0, p.path))
        ],
        "ignored_files": ds.ignored,
        "duplicate_files": ds.duplicates,
        "versions": versions,
        "member_conflicts": conflicts,
        "unmapped_pg_status": {
            str(r): d.unmapped_pg_status for r, d in sorted(dumps.items()) if d.unmapped_pg_status
        },
        "summary": _summary(sorted(culprits), stalled, in_flight, no_file, ds),
    }


def _public(g: dict[str, Any]) -> dict[str, Any]:
    order = [
        "id",
        "description",
        "ranks",
        "state",
        "kind",
        "stalled_op",
        "lagging_ranks",
        "culprit_ranks",
        "blocked_elsewhere",
        "waiting_ranks",
        "lag",
        "missing_ranks",
        "unknown_ranks",
        "mismatch",
        "members_inferred",
    ]
    return {k: g[k] for k in order if k in g}


def _culprit_reasons(
    culprits: Iterable[int],
    stalled: list[dict[str, Any]],
    nodata: set[int],
    waited_by: dict[int, set[int]],
) -> list[dict[str, Any]]:
    out = []
    for r in sorted(culprits):
        where = [
            {"group": g["id"], "description": g["description"], "how": g["lag"][str(r)]}
            for g in stalled
            if str(r) in g["lag"]
        ]
        out.append(
            {
                "rank": r,
                "dump": "missing" if r in nodata else "present",
                "groups": where,
                "waited_on_by": len(waited_by.get(r, set()) - {r}),
            }
        )
    return out


def _summary(
    culprits: list[int],
    stalled: list[dict[str, Any]],
    in_flight: list[dict[str, Any]],
    no_file: list[int],
    ds: DumpSet,
) -> str:
    parts = []
    if culprits:
        parts.append(f"culprit ranks {culprits}")
    elif stalled:
        parts.append("stalled groups found but no rank stands out")
    elif in_flight:
        parts.append("work in flight on every member; no rank lags")
    else:
        parts.append("no stalled process group")
    parts.append(f"{len(stalled)} stalled group(s)")
    if no_file:
        parts.append(f"{len(no_file)} rank(s) without a dump")
    if ds.problems:
        parts.append(f"{len(ds.problems)} unreadable file(s)")
    return "; ".join(parts)
