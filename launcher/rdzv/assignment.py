"""Rank assignment of the barrier rendezvous: a pure function of the round's participants.

`assign(participants, min_nodes, segment)` decides which nodes are active in a round and
their group ranks; the others are hot spares (standbys) with reserved ranks after the
active ones. No store, no clock: every node that reads the same participant list computes
the same answer, and the unit tests call it directly.

- Ordering key: a node's infra group rank (`--ft-use-infra-group-rank`) when given,
  else its descriptor (address, pid, node id), so the result never depends on join order.
- Simple mode (`segment` None): the first `min_nodes` nodes become active, nodes that
  were active in the previous round before standbys (a returning active node is preferred
  over an early standby), each group by key. Active ranks follow the key order.
- Segment mode (`segment` N): nodes are grouped by segment id (NVLink domain); a domain
  gives floor(size / N) segments of N nodes; `min_nodes / N` segments become active,
  segments made only of previously active nodes first, then by key. Nodes of a segment
  get contiguous ranks. A domain that lost a node below N has no whole segment left:
  its survivors become standbys and another domain's segment replaces it whole.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Participant:
    node_id: str  # unique per launcher process (host:pid:random)
    addr: str = ""
    pid: int = 0
    infra_rank: int | None = None
    segment: str | None = None
    was_active: bool = False  # active in the last round this node took part in

    def key(self) -> tuple[int, int, str, int, str]:
        if self.infra_rank is not None:
            return (0, self.infra_rank, "", 0, self.node_id)
        return (1, 0, self.addr, self.pid, self.node_id)


@dataclass(frozen=True)
class Assignment:
    node_id: str
    group_rank: int  # 0..world-1 when active; reserved rank >= world for a standby
    active: bool


class AssignmentError(ValueError):
    """The participants cannot form a valid round (duplicate infra ranks)."""


def check_unique_infra_ranks(participants: list[Participant]) -> None:
    seen: dict[int, str] = {}
    for p in participants:
        if p.infra_rank is None:
            continue
        if p.infra_rank in seen:
            raise AssignmentError(
                f"duplicate infra group rank {p.infra_rank}: nodes {seen[p.infra_rank]} "
                f"and {p.node_id} (check SLURM_PROCID/SLURM_NODEID/GROUP_RANK)"
            )
        seen[p.infra_rank] = p.node_id


def _segments(participants: list[Participant], size: int) -> list[list[Participant]]:
    """Whole segments of `size` nodes, each from one domain (previously active nodes of a
    domain first, then by key)."""
    domains: dict[str, list[Participant]] = {}
    for p in participants:
        domains.setdefault(p.segment or "", []).append(p)
    out: list[list[Participant]] = []
    for members in domains.values():
        members.sort(key=lambda p: (not p.was_active, p.key()))
        for i in range(len(members) // size):
            out.append(members[i * size : (i + 1) * size])
    return out


def choose_active(
    participants: list[Participant], min_nodes: int, segment: int | None = None
) -> list[Participant] | None:
    """The active nodes of a round (in rank order), or None when there are not enough."""
    if segment is None:
        pool = sorted(participants, key=lambda p: (not p.was_active, p.key()))
        if len(pool) < min_nodes:
            return None
        return sorted(pool[:min_nodes], key=lambda p: p.key())
    segs = _segments(participants, segment)
    need = min_nodes // segment
    if len(segs) < need:
        return None
    segs.sort(key=lambda s: (not all(p.was_active for p in s), min(p.key() for p in s)))
    chosen = segs[:need]
    chosen.sort(key=lambda s: min(p.key() for p in s))  # segments in key order
    return [p for s in chosen for p in sorted(s, key=lambda p: p.key())]


def assign(
    participants: list[Participant], min_nodes: int, segment: int | None = None
) -> list[Assignment] | None:
    """Every participant's role and group rank, or None when the round cannot start."""
    check_unique_infra_ranks(participants)
    active = choose_active(participants, min_nodes, segment)
    if active is None:
        return None
    ids = {p.node_id for p in active}
    spares = sorted((p for p in participants if p.node_id not in ids), key=lambda p: p.key())
    out = [Assignment(p.node_id, r, True) for r, p in enumerate(active)]
    out += [Assignment(p.node_id, len(active) + i, False) for i, p in enumerate(spares)]
    return out
