"""The primary failure and the rank it is blamed on, from every source a cycle offers.

Sources, in the order they are trusted (`Evidence.rank_source` says which one named the
rank):

1. a Flight Recorder culprit rank (`decide(..., fr_culprit_ranks=...)`),
2. the log's own root lines (earliest root before teardown; `prefix` / `message` rank),
   except that an infrastructure root of the classes in `taxonomy.yaml`
   (`infrastructure_wins`) wins over a workload root that is only *probable* (or a
   retryable one: CUDA OOM, NaN), and a bare
   Slurm `CANCELLED` line yields to one that gives the reason (preemption, node failure),
3. the launcher's facts (`launcher`): a declared hang, else the first failing rank; a rank
   that died by a signal without a root line of its own is the primary even when other
   ranks logged errors after it,
4. torch elastic's `Root Cause (first observed failure)` entry (`elastic_root_cause`) or
   its `failed (exitcode: C) local_rank: L (pid: P)` line (`elastic_exit`; the local rank
   is the global one only on a single node),
5. for a root line without a rank: a kernel line's PID (Xid, OOM killer) that an elastic
   exit report ties to a rank (`kernel`), else a line of the same failure class that names
   a rank, else the one process a launcher's summary reported failed (Open MPI's
   mpirun/prterun: `mpirun`; MPICH's mpiexec: `mpich`; torch.multiprocessing.spawn's
   process index, on a single node only: `spawn`), else the single failed process torch
   elastic reported,
6. a collective-timeout cascade in which every rank but one timed out: the silent rank is
   the suspect (`silent_rank`); it goes before the launcher's first exit and torch
   elastic's reports when the rank they name only aborted (SIGABRT, the watchdog's own
   abort) or only logged cascades,
7. else the earliest cascade, as the scanner chose it, on the one process a launcher's
   summary reported failed (`mpirun`, `mpich`, `spawn`: a non-zero exit code or a SIGABRT
   names that process, it did not only report a peer's failure); else its rank is the rank that
   REPORTED the cascade (`rank_source: "cascade_reporter"`), a victim, not a blamed rank.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from relaunch.restart_agent.fingerprint import fingerprint
from relaunch.restart_agent.model import CycleEvidence, Evidence, ProcessExit
from relaunch.restart_agent.prefixes import bounded_int
from relaunch.restart_agent.scanner import choose_primary
from relaunch.restart_agent.taxonomy import taxonomy

_PID = re.compile(r"(?:Killed process|pid[=: ]+|PID )\s*(\d{1,10})\b")
TIMEOUT_CLASSES = ("nccl_watchdog_timeout",)
REASONED_ENDS = ("preemption", "node_failure", "time_limit")
SINGLE_NODE_RANKS = 8  # at most this many ranks seen and one node: local rank == rank
# rank sources of a line that names the process that FAILED (not the rank that reported a
# cascade): a cascade from such a line keeps its source and names that rank
FAILED_PROCESS_SOURCES = (
    "mpirun",
    "mpich",
    "spawn",
    "deepspeed",
    "ray_train",
    "paddle",
    "paddle_trainer",
    "horovod",
)
# rank sources that hold a LOCAL rank (torch.multiprocessing.spawn's process index, Paddle's
# container index in its pod): the global rank only on a single node, dropped elsewhere
LOCAL_RANK_SOURCES = ("spawn", "deepspeed", "paddle")


def _before_teardown(e: Evidence, evidence: CycleEvidence) -> bool:
    t = evidence.first_teardown_line
    return t is None or e.line < t


def _single_node(evidence: CycleEvidence) -> bool:
    """One node whose global ranks are its local ranks: one node name at most, and every
    rank seen below SINGLE_NODE_RANKS (a later node's log shows ranks 8.. and its local
    rank 3 is not global rank 3)."""
    ranks = evidence.ranks_seen
    return len(evidence.nodes) <= 1 and (not ranks or max(ranks) < SINGLE_NODE_RANKS)


def _from_exit(e: ProcessExit, rank: int | None, why: str) -> Evidence:
    """A root built from a process exit nobody logged a reason for."""
    cls = taxonomy().exit_class(e.signal)
    how = f"signal {e.signal} (exit code {e.exitcode})" if e.signal else f"exit code {e.exitcode}"
    text = f"rank {rank} exited by {how} without an error of its own in the log ({why})"
    return Evidence(
        line=e.line,
        rank=rank,
        pattern_id=f"{e.source}.exit",
        failure_class=cls,
        domain="unknown",
        role="root",
        recoverability="unknown",
        text=text,
        fingerprint=fingerprint(cls, f"process exit {e.signal or e.exitcode}"),
        node=e.node,
        rank_source=e.source if e.source != "elastic_failure" else "elastic_root_cause",
    )


def _hang(h: dict[str, object]) -> Evidence:
    section = h.get("section") or None
    initial = bool(h.get("initial"))
    where = f" in section {section}" if section else ""
    start = " before its first heartbeat" if initial else ""
    msg = f"hang declared by the launcher heartbeat{start}{where}"
    return Evidence(
        line=int(h.get("line") or 0),  # type: ignore[call-overload]
        rank=int(h["rank"]),  # type: ignore[call-overload]
        pattern_id="launcher.fact.hang",
        failure_class="hang_detected",
        domain="infrastructure",
        role="root",
        recoverability="retry",
        text=f"rank {h['rank']}: {msg} (silent {h.get('silent_s')} s)",
        fingerprint=fingerprint("hang_detected", msg),
        entity=str(section) if section else None,
        rank_source="launcher",
    )


def _fr_culprit(evidence: CycleEvidence, culprits: Sequence[int]) -> Evidence:
    """A Flight Recorder culprit rank as the cycle's root when the log has only cascades
    (the waiting ranks' timeouts): the rank the launcher saw fail first if it is a culprit,
    else the lowest. Its launcher hang fact if one was declared; its death by a signal that
    starts a failure (a kill from outside writes no dump: the dumps name it missing) keeps
    that signal's class; else a hang named by the dumps, at the rank's exit line."""
    facts = evidence.launcher
    first = facts.first_exit if facts is not None else None
    rank = first.rank if first is not None and first.rank in culprits else min(culprits)
    hangs = [h for h in (facts.hangs if facts else []) if h.get("rank") == rank]
    if hangs:
        return _hang(hangs[0])
    exits = [x for x in (facts.exits if facts else []) if x.rank == rank]
    if exits and exits[0].signal and exits[0].signal not in taxonomy().follow_on_signals:
        return _from_exit(exits[0], rank, "a Flight Recorder culprit rank")
    msg = "never entered the collective the other ranks waited in (Flight Recorder dumps)"
    return Evidence(
        line=exits[0].line if exits else 0,
        rank=rank,
        pattern_id="fr.culprit",
        failure_class="hang_detected",
        domain="infrastructure",
        role="root",
        recoverability="retry",
        text=f"rank {rank}: {msg}",
        fingerprint=fingerprint("hang_detected", msg),
        node=exits[0].node if exits else None,
        rank_source="flight_recorder",
    )


def _with_rank(e: Evidence, rank: int, source: str) -> Evidence:
    return replace(e, rank=rank, rank_source=source)


def _first_root_on(evidence: CycleEvidence, rank: int) -> Evidence | None:
    on = [e for e in evidence.roots if e.rank == rank]
    before = [e for e in on if _before_teardown(e, evidence)]
    found = before or on
    return found[0] if found else None


ROOT_CAUSE_LINES = 60  # an entry's own error is at most this many lines below its exitcode


def _root_cause_error(evidence: CycleEvidence) -> Evidence | None:
    """The error torch elastic's `Root Cause (first observed failure)` entry holds (its
    `traceback :` field, or torch 1.9's `"message": "..."`), with the entry's rank: the root
    error a few lines below the entry's `exitcode` line, before any other entry."""
    # the first Root Cause entry only (torch prints one per summary): bounded work
    x = next((x for x in evidence.exits if x.source == "elastic_root_cause" and x.exitcode), None)
    if x is None or x.rank is None:
        return None
    end = x.line + ROOT_CAUSE_LINES + 1
    later = [y.line for y in evidence.exits if x.line < y.line < end]
    end = min([end, *later])
    for e in evidence.roots:  # in log order, bounded (MAX_ROOTS)
        # the entry's own `exitcode` line counts: a signal exit is matched on it
        if x.line <= e.line < end and e.rank in (None, x.rank):
            return e if e.rank is not None else _with_rank(e, x.rank, "elastic_root_cause")
    return None


def _detail_of(root: Evidence, evidence: CycleEvidence) -> Evidence | None:
    """The cause `root`'s own report names a few lines after it, on its rank (taxonomy.yaml
    `detailed_by`: NCCL's `Last error: Cuda failure 2 'out of memory'`), if any: the first
    later root of the rank within `detail_lines`, when a `detailed_by` row matched it; a root
    of another class before it ends the report (that one is no detail of this)."""
    tax = taxonomy()
    rows = tax.detailed_by.get(root.failure_class)
    if not rows:
        return None
    last = root.line + tax.detail_lines
    for e in sorted(evidence.roots, key=lambda x: x.line):
        if e.line <= root.line or e.rank != root.rank:
            continue
        if e.line > last:
            return None
        if e.pattern_id in rows:
            return e
        if e.failure_class != root.failure_class:
            return None
    return None


def _infra_winner(primary: Evidence, evidence: CycleEvidence) -> Evidence | None:
    if primary.domain != "workload" or primary.recoverability not in ("probable", "retry"):
        return None
    wins = taxonomy().infrastructure_wins
    for e in evidence.roots:
        ok = e.domain == "infrastructure" and e.failure_class in wins
        if ok and _before_teardown(e, evidence) and _detail_of(e, evidence) is None:
            return e
    kills = taxonomy().outside_kills
    return next((e for e in evidence.roots if e.failure_class in kills), None)


def _named_over_unknown(primary: Evidence, evidence: CycleEvidence) -> Evidence | None:
    """An exception no row names and whose structure leans nowhere (`unknown`: a C++
    `what():` such as 'Enqueue process failed.') yields to a root of the same cycle that a
    row does name (the allocator's out-of-memory line right after it): the named one says
    what happened, the bare one only that something did."""
    if primary.domain != "unknown" or not primary.structural:
        return None
    return next(
        (
            e
            for e in evidence.roots
            if e is not primary and e.structural is None and e.domain != "unknown"
        ),
        None,
    )


def _reasoned_end(primary: Evidence, evidence: CycleEvidence) -> Evidence | None:
    """A bare 'CANCELLED' line yields to a Slurm line of the same cycle that gives the reason."""
    if primary.failure_class != "user_cancellation":
        return None
    for e in evidence.roots:
        if e.failure_class in REASONED_ENDS and e is not primary:
            return e
    return None


def _rank_from_peers(e: Evidence, evidence: CycleEvidence) -> tuple[int, str] | None:
    """A rank for a rankless root: a line of the same failure class that has one, or the
    single failed process torch elastic reported."""
    for x in list(evidence.roots) + list(evidence.cascade_evidence):
        if x.failure_class == e.failure_class and x.rank is not None:
            return x.rank, x.rank_source or "message"
    named = _failed_process(evidence)
    if named is not None:
        return named
    failed = {
        (x.rank, x.source) if x.rank is not None else (x.local_rank, "elastic_exit")
        for x in evidence.exits
        if x.exitcode and x.source in ("elastic_root_cause", "elastic_exit")
    }
    ranks = {r for r, _ in failed if r is not None}
    if len(ranks) == 1:
        rank = ranks.pop()
        sources = sorted(src for r, src in failed if r == rank)
        if sources[0] != "elastic_exit" or _single_node(evidence):
            return rank, sources[0]
    return None


def _cut_root_cause(x: ProcessExit) -> bool:
    """torch elastic's Root Cause entry read only up to its `rank` line (elastic.py)."""
    return x.source == "elastic_root_cause" and x.exitcode is None and x.first


def _failed_process(evidence: CycleEvidence) -> tuple[int, str] | None:
    """The one rank a launcher summary reported as the process that failed (Open MPI's
    `process rank N ... exited on signal` / `The first process to do so was: Process name:
    [[J,S],N]`), when it reported exactly one."""
    local_ok = _single_node(evidence)
    found = {
        (x.rank, x.rank_source)
        for x in list(evidence.roots) + list(evidence.cascade_evidence)
        if x.rank is not None
        and x.rank_source in FAILED_PROCESS_SOURCES
        and (local_ok or x.rank_source not in LOCAL_RANK_SOURCES)
    }
    if len({r for r, _ in found}) != 1:
        return None
    rank, source = found.pop()
    assert rank is not None and source is not None
    return rank, source


def _rank_by_pid(e: Evidence, evidence: CycleEvidence) -> int | None:
    m = _PID.search(e.text)
    pid = bounded_int(m.group(1), 10) if m else None
    if pid is None:
        return None
    for x in evidence.exits:
        if x.pid == pid:
            if x.rank is not None:
                return x.rank
            if x.local_rank is not None and _single_node(evidence):
                return x.local_rank
    return None


def _silent_rank(primary: Evidence, evidence: CycleEvidence) -> int | None:
    """The one rank of the world that did not time out, when all the others did.

    The world is the launcher's `world_size`, else ranks 0 up to the highest rank seen (a
    rank that never printed is a gap). Counted, never enumerated: a world of 10^7 ranks
    costs what its timed-out ranks cost.
    """
    if primary.failure_class not in TIMEOUT_CLASSES:
        return None
    group = next((g for g in evidence.cascades if g.failure_class == primary.failure_class), None)
    if group is None or not group.ranks:
        return None
    facts = evidence.launcher
    if facts is not None and facts.world_size:
        world = facts.world_size
    else:
        world = max(max(evidence.ranks_seen, default=-1), max(group.ranks)) + 1
    timed_out = set(group.ranks)
    if world < 2 or len(timed_out) != world - 1 or min(timed_out) < 0 or max(timed_out) >= world:
        return None
    return world * (world - 1) // 2 - sum(timed_out)


def _victim(rank: int, x: ProcessExit, evidence: CycleEvidence) -> bool:
    """A rank the launcher or torch elastic saw exit that is only a cascade's victim: it
    aborted (the NCCL watchdog's SIGABRT) or logged nothing but cascades."""
    if x.signal == "SIGABRT" or x.exitcode == -6:
        return True
    on = [e for e in evidence.roots if e.rank == rank]
    return not on and any(e.rank == rank for e in evidence.cascade_evidence)


def _as_silent(primary: Evidence, silent: int) -> Evidence:
    return replace(
        primary,
        rank=silent,
        rank_source="silent_rank",
        text=f"rank {silent} is the only rank that did not report: {primary.text}"[:500],
    )


SILENT_REASON = "every rank but one timed out in a collective: the silent rank is the suspect"


def pick_primary(
    evidence: CycleEvidence, fr_culprit_ranks: Sequence[int] | None = None
) -> tuple[Evidence | None, str]:
    """(primary evidence, why it was chosen), with its rank and `rank_source` filled in."""
    primary, reason = _pick(evidence, fr_culprit_ranks)
    if (
        primary is not None
        and primary.rank_source in LOCAL_RANK_SOURCES
        and not _single_node(evidence)
    ):
        # a spawn index on a job seen on several nodes is a local rank: no global rank
        return replace(primary, rank=None, rank_source=None), reason + (
            "; its process index is a local rank on a multi-node job: no rank named"
        )
    return primary, reason


def _pick(
    evidence: CycleEvidence, fr_culprit_ranks: Sequence[int] | None = None
) -> tuple[Evidence | None, str]:
    if fr_culprit_ranks:
        primary, reason = choose_primary(
            evidence.roots,
            evidence.cascade_evidence,
            evidence.first_teardown_line,
            set(fr_culprit_ranks),
        )
        if primary is not None and primary.rank in set(fr_culprit_ranks):
            return primary, reason
    else:
        primary, reason = evidence.primary, evidence.primary_reason
    own = _root_cause_error(evidence)
    if own is not None and not fr_culprit_ranks:
        primary, reason = own, "the error in torch elastic's Root Cause entry, on the rank it names"
    is_root = primary is not None and primary.role == "root"
    if primary is not None and is_root and own is None:
        better = _named_over_unknown(primary, evidence)
        if better is not None:
            primary, reason = (
                better,
                reason + "; a named root wins over an exception that leans nowhere",
            )
        detail = _detail_of(primary, evidence)
        if detail is not None:
            primary, reason = detail, reason + "; the cause its own report names after it"
    if primary is not None and is_root:
        winner = _infra_winner(primary, evidence)
        if winner is not None and own is primary and winner.rank not in (None, own.rank):
            # torch elastic says which rank failed first and with what: another rank's
            # infrastructure error (a peer's NCCL error after it died) does not explain it
            winner = None
        if winner is not None:
            primary = winner
            reason = (
                "a kill from outside the process in the same cycle wins over a probable workload bug"
                if winner.failure_class in taxonomy().outside_kills
                else "infrastructure root in the same cycle wins over a probable workload bug"
            )
        ended = _reasoned_end(primary, evidence)
        if ended is not None:
            primary = ended
            reason = "the scheduler's line that gives the reason the job was cancelled"
    facts = evidence.launcher
    if fr_culprit_ranks and not is_root:
        return _fr_culprit(evidence, fr_culprit_ranks), (
            "the Flight Recorder's culprit rank: the others waited in a collective it "
            "never entered (no root of its own in the log)"
        )
    silent = _silent_rank(primary, evidence) if primary is not None and not is_root else None
    # ------------------------------------------------------------ the launcher's facts
    if facts is not None:
        if not is_root and facts.hangs:
            return _hang(facts.hangs[0]), "hang declared by the launcher (no root in the log)"
        first = facts.first_exit
        if (
            primary is not None
            and silent is not None
            and first is not None
            and first.rank is not None
            and first.rank != silent
            and _victim(first.rank, first, evidence)
        ):
            return _as_silent(primary, silent), SILENT_REASON + (
                "; the launcher's first failing rank only aborted on the timeout"
            )
        if first is not None and first.rank is not None:
            f = first.rank
            if primary is not None and is_root and primary.rank == f:
                return primary, reason + "; the launcher saw this rank fail first"
            on_f = _first_root_on(evidence, f)
            if on_f is not None:
                return on_f, "earliest root on the rank the launcher saw fail first"
            if primary is not None and is_root and primary.rank is None:
                return _with_rank(primary, f, "launcher"), reason + "; rank from the launcher"
            initiating_death = (
                first.signal is not None and first.signal not in taxonomy().follow_on_signals
            )
            if not is_root or initiating_death:
                return _from_exit(first, f, "the launcher saw it fail first"), (
                    "the launcher saw this rank fail first and the log has no error of its own"
                )
    # ------------------------------------------------------------ the log and torch elastic
    if primary is not None and is_root:
        if primary.rank is None:
            same_line = [x for x in evidence.exits if x.line == primary.line]
            for x in same_line:
                if x.rank is not None:
                    return _with_rank(primary, x.rank, x.source), reason
                if x.local_rank is not None and _single_node(evidence):
                    return _with_rank(primary, x.local_rank, "elastic_exit"), reason
            rank = _rank_by_pid(primary, evidence)
            if rank is not None:
                return _with_rank(primary, rank, "kernel"), reason + "; rank tied by its PID"
            peer = _rank_from_peers(primary, evidence)
            if peer is not None:
                return _with_rank(primary, *peer), reason
        return primary, reason
    root_cause = [x for x in evidence.exits if x.source == "elastic_root_cause" and x.exitcode]
    agent = [x for x in evidence.exits if x.source == "elastic_exit" and x.exitcode]
    if primary is not None and silent is not None:
        exits = root_cause or agent
        first = exits[0] if exits else None
        rank = (
            None if first is None else (first.rank if first.rank is not None else first.local_rank)
        )
        if first is None or (
            rank != silent and _victim(rank if rank is not None else -1, first, evidence)
        ):
            return _as_silent(primary, silent), SILENT_REASON
    if root_cause:
        x = root_cause[0]
        on = _first_root_on(evidence, x.rank) if x.rank is not None else None
        if on is not None:
            return on, "earliest root on torch elastic's first observed failure"
        return _from_exit(x, x.rank, "torch elastic's first observed failure"), (
            "torch elastic's Root Cause (first observed failure) names the rank"
        )
    if agent and _single_node(evidence) and agent[0].local_rank is not None:
        x = agent[0]
        return _from_exit(x, x.local_rank, "torch elastic's agent saw it fail"), (
            "torch elastic's agent reported this local rank failed (single node)"
        )
    if primary is not None and primary.role == "cascade":
        if primary.rank_source in FAILED_PROCESS_SOURCES:
            return primary, reason + "; the launcher's summary names the failed process"
        named = _failed_process(evidence)
        if named is not None:
            return _with_rank(primary, *named), reason + (
                "; rank of the process the launcher's summary reported failed"
            )
        cut = next((x for x in evidence.exits if _cut_root_cause(x)), None)
        if cut is not None and cut.rank is not None:
            return _with_rank(primary, cut.rank, "elastic_root_cause"), reason + (
                "; rank of torch elastic's Root Cause entry (its block cut before the exit code)"
            )
        if primary.rank is not None:
            # only cascades, no suspect: the rank is the one that REPORTED the cascade, a
            # victim, not a blamed rank
            return replace(primary, rank_source="cascade_reporter"), reason
    return primary, reason
