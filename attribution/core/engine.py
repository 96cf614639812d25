"""The attribution engine: one cycle log in, one saved STOP/RESTART verdict out.

`AttributionEngine(repo, policy, audit_dir)` composes the restart agent and the history
repository: `analyze_cycle` streams the log once through `restart_agent.LogScanner`,
hashing the same bytes with SHA-256 as it goes (the log's identity: path, size, sha256;
`hash_logs=False` skips the hash, for callers that persist nothing), loads the job's prior
verdicts, decides, saves the verdict with the identity, and hands a `VerdictEvent` to the
listeners (audit artifacts, Slack, webhook export, LLM enrichment).

Listeners run on one background thread, in registration order, after the verdict is saved:
a listener that fails is logged and one that is slow delays nothing; neither can change the
verdict returned. `drain()` waits until every queued event has been handled (tests, CLI
exit), `close()` drains and stops the thread.

`opener` (optional) is how the engine opens a log: a callable path -> read-only file
descriptor. The service passes `attribution.service.confined.open_confined` bound to its
allowed roots, so even the engine's own reads (node-health re-decisions) never follow a
symlink out of them; without it logs are opened with plain `open`.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relaunch.attribution.core.background import BackgroundQueue
from relaunch.attribution.core.fact_keys import FactKeys
from relaunch.restart_agent import LogScanner, decide, safe_files
from relaunch.restart_agent.budget import AnalysisBudget
from relaunch.restart_agent.facts import PREFIX as _FACT_PREFIX
from relaunch.restart_agent.facts import FactCollector
from relaunch.restart_agent.model import (
    CycleEvidence,
    FRFindings,
    LauncherFacts,
    NodeHealthNote,
    PolicyConfig,
    PriorCycle,
    Verdict,
)
from relaunch.restart_agent.nodes import NodeScan
from relaunch.restart_agent.stragglers import verdict_stragglers

if TYPE_CHECKING:  # storage (SQLAlchemy) is imported only by callers that persist
    from relaunch.storage import CycleRecord, HistoryRepository

log = logging.getLogger(__name__)

CHUNK_SIZE = 1 << 20


@dataclass(frozen=True)
class LogIdentity:
    """What was analysed: the file, its size in bytes, its SHA-256 (None when not hashed)."""

    path: str
    size: int
    sha256: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class DecisionInputs:
    """What the policy decided on, as typed objects: the prior cycles it saw, the policy,
    the Flight Recorder culprit ranks (None: no FR findings) and the node-health notes.
    Serialised only where it leaves the process (the audit artifact's `inputs`)."""

    prior_cycles: tuple[PriorCycle, ...]
    policy: PolicyConfig
    fr_culprit_ranks: tuple[int, ...] | None
    node_health: tuple[NodeHealthNote, ...] = ()


@dataclass(frozen=True)
class VerdictEvent:
    """Handed to each listener after a verdict is saved. `verdict` is the typed `Verdict`
    (its `to_dict()` is exactly what was saved); each listener gets its own copy."""

    job_id: str
    cycle: int
    log_path: str
    verdict: Verdict
    log_identity: dict[str, Any]
    audit_dir: str | None = None  # where audit listeners should write (None: no audit files)
    analysis_ms: float = 0.0
    # the caller's notes (incremental, resets, scan_ms, reason, ...), JSON-able
    extra: dict[str, Any] = field(default_factory=dict)
    # None: an event of a caller that saved the verdict itself (`notify`)
    inputs: DecisionInputs | None = None


Listener = Callable[[VerdictEvent], None]
Opener = Callable[[str], int]


class _BackgroundHasher:
    """SHA-256 on a helper thread: hashlib releases the GIL on large buffers, so hashing
    overlaps with the scan on a second core instead of adding to it. Bounded queue."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._chunks: BackgroundQueue[bytes] = BackgroundQueue(
            self._hash.update, name="relaunch-log-sha256", maxsize=8
        )

    def update(self, chunk: bytes) -> None:
        self._chunks.put_wait(chunk)

    def hexdigest(self) -> str:
        self._chunks.close()
        return self._hash.hexdigest()

    def abandon(self) -> None:
        self._chunks.close(0, discard=True)


FACT_TAIL_BYTES = 1 << 20  # the launcher writes its end-of-cycle facts last
FACT_PREFIX_BYTES = _FACT_PREFIX.encode()


def tail_facts(log_path: str, opener: Opener | None = None) -> LauncherFacts | None:
    """The launcher facts in the last MiB of a cycle log (regular files only)."""
    # FIFOs and devices refused, never read (restart_agent.safe_files)
    fd = opener(log_path) if opener is not None else safe_files.open_regular(log_path)
    with os.fdopen(fd, "rb", buffering=0) as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        f.seek(max(0, st.st_size - FACT_TAIL_BYTES))
        data = f.read(FACT_TAIL_BYTES)
    collector = FactCollector()
    for n, raw in enumerate(data.split(b"\n"), 1):
        if raw.startswith(FACT_PREFIX_BYTES):
            collector.line(raw.decode("utf-8", "replace").rstrip("\r"), n)
    return collector.result()


class StreamingScan:
    """One pass over a log's bytes, fed in any chunks: the `LogScanner` and the SHA-256 of
    the same bytes. `background=True` hashes on a helper thread (one-shot scans of large
    logs); the service's incremental reads hash inline (a thread per tracked log would
    outlive the request). `finish()` returns (CycleEvidence, LogIdentity)."""

    def __init__(
        self,
        path: str,
        *,
        hash_log: bool = True,
        background: bool = False,
        budget: AnalysisBudget | None = None,
    ) -> None:
        self.path = path
        self.size = 0  # bytes scanned (and hashed): none after the budget was reached
        self._scanner = LogScanner(budget=budget)
        self._hasher: _BackgroundHasher | Any | None = None
        if hash_log:
            self._hasher = _BackgroundHasher() if background else hashlib.sha256()

    @property
    def budget_reached(self) -> bool:
        """The analysis budget was reached: what is fed now is neither scanned nor hashed."""
        return self._scanner.budget_reached is not None

    def feed(self, chunk: bytes) -> None:
        scanner = self._scanner
        before = scanner.bytes_read
        scanner.feed(chunk)
        used = scanner.bytes_read - before  # less than the chunk once the budget is reached
        if used < len(chunk):
            chunk = chunk[:used]
        self.size += used
        if self._hasher is not None and chunk:
            self._hasher.update(chunk)

    def finish(self) -> tuple[CycleEvidence, LogIdentity]:
        evidence = self._scanner.finish()
        digest = self._hasher.hexdigest() if self._hasher is not None else None
        return evidence, LogIdentity(self.path, self.size, digest)

    def abandon(self) -> None:
        """Stop a background hash without a result (the read failed)."""
        if isinstance(self._hasher, _BackgroundHasher):
            self._hasher.abandon()


def scan_with_identity(
    log_path: str | os.PathLike[str],
    *,
    hash_log: bool = True,
    chunk_size: int = CHUNK_SIZE,
    opener: Opener | None = None,
    budget: AnalysisBudget | None = None,
) -> tuple[CycleEvidence, LogIdentity]:
    """Scan a log in one streaming pass; return (CycleEvidence, LogIdentity).

    The same chunks feed the scanner and SHA-256 (on a helper thread), so the identity
    costs no second read. Raises FileNotFoundError / IsADirectoryError / PermissionError
    like `scan_file`; with `opener`, whatever the opener raises, and the bytes come from
    the descriptor it returns.
    """
    path = os.fspath(log_path)
    if opener is None and os.path.isdir(path):
        raise IsADirectoryError(21, "Is a directory", path)
    fd = opener(path) if opener is not None else os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    with os.fdopen(fd, "rb", buffering=0) as f:
        scan = StreamingScan(path, hash_log=hash_log, background=True, budget=budget)
        try:
            while not scan.budget_reached and (chunk := f.read(chunk_size)):
                scan.feed(chunk)
        except BaseException:
            scan.abandon()
            raise
    return scan.finish()


def _fr_ranks_of(rec: CycleRecord | None) -> list[int] | None:
    """Culprit ranks of the FR findings stored with a cycle record, if usable."""
    ranks = FRFindings.from_dict(rec.fr_findings).culprit_ranks if rec else None
    if isinstance(ranks, list) and all(isinstance(r, int) for r in ranks):
        return ranks
    return None


def _notes_of(rec: CycleRecord | None) -> list[NodeHealthNote]:
    """The node-health records of a cycle record as policy notes; unusable ones are logged."""
    notes: list[NodeHealthNote] = []
    if rec is None:
        return notes
    for node, record in sorted((rec.node_health or {}).items()):
        try:
            notes.append(NodeHealthNote.from_dict(record))
        except (ValueError, AttributeError, TypeError) as exc:
            log.warning(
                "node health record %r of %s/%s ignored: %s", node, rec.job_id, rec.cycle, exc
            )
    return notes


def records_node_health(verdict: Mapping[str, Any] | None, note: NodeHealthNote) -> bool:
    """True when `verdict` lists exactly this report of the node, so re-deciding the
    cycle for `note` changes nothing; False when the node is absent or listed with an
    earlier report (an analysis that read the records before `note` was stored)."""
    listed = [
        n
        for n in (verdict or {}).get("node_health") or []
        if isinstance(n, dict) and str(n.get("node")) == note.node
    ]
    return bool(listed) and listed[0] == note.to_dict()


class AttributionEngine:
    """Scan → prior verdicts → decide → save → listeners."""

    def __init__(
        self,
        repo: HistoryRepository | None,
        policy: PolicyConfig | None = None,
        audit_dir: str | os.PathLike[str] | None = None,
        *,
        hash_logs: bool = True,
        history_limit: int | None = None,
        opener: Opener | None = None,
        budget: AnalysisBudget | None = None,
    ) -> None:
        """`repo=None` analyses without history and saves nothing (`relaunch analyze` without
        --db). `history_limit` caps how many prior cycles the policy sees (None: all stored).
        `budget`: each scan's analysis budget (restart_agent.budget; None: its defaults).
        """
        self.budget = budget
        self.repo = repo
        self.policy = policy or PolicyConfig()
        self.audit_dir = str(Path(audit_dir)) if audit_dir is not None else None
        self.hash_logs = hash_logs
        self.history_limit = history_limit
        self.opener = opener
        # fact keys launchers handed over (a service's analyses verify facts with them)
        self.fact_keys = FactKeys()
        self._listeners: list[Listener] = []
        self._events: BackgroundQueue[VerdictEvent] | None = None  # started on first use
        self._lock = threading.Lock()
        self._closed = False

    # -- listeners ---------------------------------------------------------------------

    def add_listener(self, fn: Listener) -> None:
        """Call `fn(event)` after each saved verdict (on the engine's listener thread)."""
        with self._lock:
            self._listeners.append(fn)

    def remove_listener(self, fn: Listener) -> None:
        with self._lock:
            if fn in self._listeners:
                self._listeners.remove(fn)

    def _dispatch(self, event: VerdictEvent) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for fn in listeners:
            try:
                # Each listener gets its own copy: none can alter what others see.
                fn(dataclasses.replace(event, verdict=copy.deepcopy(event.verdict)))
            except Exception:
                log.exception(
                    "verdict listener %s failed for job %s cycle %s",
                    getattr(fn, "__qualname__", repr(fn)),
                    event.job_id,
                    event.cycle,
                )

    def notify(self, event: VerdictEvent) -> None:
        """Queue `event` for the listeners (for callers that save verdicts themselves)."""
        with self._lock:
            if not self._listeners or self._closed:
                return
            if self._events is None:
                self._events = BackgroundQueue(self._dispatch, name="relaunch-verdict-listeners")
            events = self._events
        events.put(event)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until listeners have handled every verdict so far; False on timeout."""
        with self._lock:
            events = self._events
        return True if events is None else events.drain(timeout)

    def close(self, timeout: float | None = 10.0) -> None:
        """Let listeners finish (up to `timeout`), then stop the listener thread."""
        self.drain(timeout)
        with self._lock:
            self._closed = True
            events = self._events
        if events is not None:
            events.close(timeout)

    # -- analysis ----------------------------------------------------------------------

    def register_cycle(
        self,
        job_id: str,
        cycle: int,
        log_path: str,
        *,
        node: str | int | None = None,
        started_at: datetime | None = None,
    ) -> CycleRecord | None:
        """Record that a cycle started writing `log_path` (no-op without a repository);
        `started_at`: when it started (default: now)."""
        if self.repo is None:
            return None
        return self.repo.register_cycle(
            job_id,
            cycle,
            log_path,
            node=None if node is None else str(node),
            started_at=started_at,
        )

    def end_cycle(
        self,
        job_id: str,
        cycle: int,
        outcome: str,
        *,
        reason: str | None = None,
        ended_at: datetime | None = None,
    ) -> None:
        """Record how a cycle ended (`HistoryRepository.end_cycle`; no-op without one).

        A cycle that succeeded is never analysed, so its straggler scores (the launcher's
        facts at the end of its log) are stored here, read from the log's tail."""
        if self.repo is None:
            return
        self.repo.end_cycle(job_id, cycle, outcome, reason=reason, ended_at=ended_at)
        if outcome != "succeeded":
            return  # a failed cycle's verdict carries them
        rec = self.repo.get_cycle(job_id, cycle)
        log_path = getattr(rec, "log_path", None)
        if not log_path:
            return
        try:
            facts = tail_facts(log_path, self.opener)
        except (OSError, ValueError) as exc:  # gone, not a regular file, outside the roots
            log.debug("no straggler scores for %s cycle %s: %s", job_id, cycle, exc)
            return
        scores = verdict_stragglers(facts, None)
        if scores is not None:
            self.repo.save_stragglers(job_id, cycle, scores.to_dict())

    def end_job(
        self, job_id: str, state: str, exit_code: int, *, reason: str | None = None
    ) -> None:
        """Record the job's final state and exit code (`HistoryRepository.end_job`)."""
        if self.repo is not None:
            self.repo.end_job(job_id, state, exit_code, reason=reason)

    def next_cycle(self, job_id: str) -> int:
        """The job's next cycle number after its stored history (0 for a new job)."""
        return 0 if self.repo is None else self.repo.next_cycle(job_id)

    def history(self, job_id: str | None, cycle: int | None) -> list[PriorCycle]:
        """The prior cycles the policy sees for (job, cycle): stored verdicts of cycles < cycle."""
        if self.repo is None or job_id is None or cycle is None:
            return []
        prior = self.repo.prior_verdicts(job_id, cycle, limit=self.history_limit)
        return [PriorCycle.from_verdict(c, v) for c, v in prior]

    def store_node_health(self, job_id: str, cycle: int, record: dict[str, Any]) -> NodeHealthNote:
        """Check (`NodeHealthNote.from_dict`: ValueError on a bad record) and store one
        node's health record with a cycle; the next analysis of the cycle reads it."""
        if self.repo is None:
            raise RuntimeError("storing a node health record needs a history repository")
        note = NodeHealthNote.from_dict(record)
        self.repo.save_node_health(job_id, cycle, {**record, "node": note.node})
        return note

    def store_fr_findings(self, job_id: str, cycle: int, findings: dict[str, Any]) -> None:
        """Store Flight Recorder findings with a cycle (registering an unknown cycle without
        a log); the next analysis of the cycle uses their culprit ranks as evidence."""
        if self.repo is None:
            raise RuntimeError("storing FR findings needs a history repository")
        if self.repo.get_cycle(job_id, cycle) is None:
            self.repo.register_cycle(job_id, cycle, None)
        self.repo.save_fr_findings(job_id, cycle, findings)

    def record_node_health(self, job_id: str, cycle: int, record: dict[str, Any]) -> Verdict | None:
        """Store one node's health record with a cycle; return the re-decided verdict.

        The record is checked and saved (`store_node_health`). When the cycle already has
        a verdict that does not list this node as
        reported (absent, or an earlier report of it) and its log is still there, the cycle
        is decided again so that its verdict records the node
        (it may change a ceiling STOP into `restart.unhealthy_node_excluded`); otherwise the
        next analysis of the cycle reads the stored record. Needs a repository.
        """
        note = self.store_node_health(job_id, cycle, record)
        assert self.repo is not None
        rec = self.repo.get_cycle(job_id, cycle)
        if rec is None or rec.verdict is None or not rec.log_path:
            return None
        if records_node_health(rec.verdict, note):  # the verdict already says exactly this
            return None
        if not self._readable(rec.log_path):
            return None
        return self.analyze_cycle(job_id, cycle, rec.log_path, extra={"reason": "node_health"})

    def analyze_nodes(
        self,
        job_id: str,
        cycle: int,
        logs: Sequence[NodeLog],
        *,
        expected: int | None = None,
        missing: Sequence[str] = (),
        previous: Mapping[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Analyse the logs of every node of a multi-node cycle as one cycle: one verdict
        for (job, cycle), saved and published; returns its JSON form. The verdict's
        `cycle_nodes` lists the logs analysed (node, group rank, path, size, sha256, their
        lines in the merged numbering), the nodes that never reported (`missing`, also
        named in `basis`) and, when a later node's log re-decided the cycle, the
        `previous` decision."""
        return _analyze_nodes(
            self,
            job_id,
            cycle,
            logs,
            expected=expected,
            missing=missing,
            previous=previous,
            extra=extra,
        )

    def _readable(self, log_path: str) -> bool:
        if self.opener is None:
            return Path(log_path).is_file()
        try:
            os.close(self.opener(log_path))
        except Exception:  # noqa: BLE001 - the opener's refusal (confined: an ApiError)
            return False
        return True

    def analyze_cycle(
        self,
        job_id: str | None,
        cycle: int | None,
        log_path: str | os.PathLike[str],
        *,
        fr_culprit_ranks: Sequence[int] | None = None,
        node_health: Sequence[NodeHealthNote] | None = None,
        evidence: CycleEvidence | None = None,
        log_identity: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
        persist: bool | None = None,
        facts_checked: bool = False,
    ) -> Verdict:
        """Analyse one cycle log; save and publish the verdict; return it (typed: callers
        serialise with `to_dict()` only where it leaves the process).

        The one way into analysis: the service, the launcher's embedded client,
        `relaunch analyze` and MCP all call it. Without a repository (or without
        job_id/cycle) nothing is saved and the history is empty. `persist` (default: True
        when there is a repository and both ids) says whether to save and publish;
        `persist=False` with a repository is a dry run: the same history and stored
        FR/node-health inputs, nothing written, no listener called, the log not hashed. When `fr_culprit_ranks` is None, culprit ranks of Flight Recorder findings
        stored with the cycle (`save_fr_findings`) are used, if any; likewise for
        `node_health` and the records stored by `record_node_health`.

        `evidence` (with its `log_identity` {"path", "size", "sha256"}) lets a caller that
        already scanned the log incrementally (the service's growing logs) skip the scan;
        `extra` is copied into the `VerdictEvent`. The event's `inputs` (`DecisionInputs`)
        carries the prior cycles the policy saw, the policy, the FR culprit ranks and the
        node-health notes as typed objects, so listeners (audit) record exactly what was
        decided on instead of re-reading history after the save.

        Saving a verdict on the job's latest cycle also sets the job's state (STOP ->
        "stopped", RESTART -> "running"; `storage.repository.verdict_job_state`).
        """
        if self.fact_keys.keys(job_id, cycle) is not None and not facts_checked:
            # the launcher handed over its key: read the facts again under it (an incremental
            # scan made before the key came trusted them by prefix; `facts_checked`: the
            # caller's `evidence` was scanned under the cycle's keys)
            evidence, log_identity = None, None
        with self.fact_keys.context(job_id, cycle):
            return self._analyze_cycle(
                job_id,
                cycle,
                log_path,
                fr_culprit_ranks=fr_culprit_ranks,
                node_health=node_health,
                evidence=evidence,
                log_identity=log_identity,
                extra=extra,
                persist=persist,
            )

    def _analyze_cycle(
        self,
        job_id: str | None,
        cycle: int | None,
        log_path: str | os.PathLike[str],
        *,
        fr_culprit_ranks: Sequence[int] | None,
        node_health: Sequence[NodeHealthNote] | None,
        evidence: CycleEvidence | None,
        log_identity: dict[str, Any] | None,
        extra: dict[str, Any] | None,
        persist: bool | None,
    ) -> Verdict:
        started = time.perf_counter()
        known = self.repo is not None and job_id is not None and cycle is not None
        if persist is None:
            persist = known
        elif persist and not known:
            raise ValueError("persist=True needs a repository, a job id and a cycle")
        if evidence is None:
            evidence, ident = scan_with_identity(
                log_path,
                hash_log=self.hash_logs and persist,
                opener=self.opener,
                budget=self.budget,
            )
            identity = ident.to_dict()
        else:
            identity = {"path": os.fspath(log_path), "size": evidence.bytes, "sha256": None}
            identity.update(log_identity or {})
        history = self.history(job_id, cycle) if known else []
        if (fr_culprit_ranks is None or node_health is None) and known:
            assert self.repo is not None and job_id is not None and cycle is not None
            stored = self.repo.get_cycle(job_id, cycle)  # one read for both
            if fr_culprit_ranks is None:
                fr_culprit_ranks = _fr_ranks_of(stored)
            if node_health is None:
                node_health = _notes_of(stored)
        fr = list(fr_culprit_ranks) if fr_culprit_ranks is not None else None
        notes = list(node_health or ())
        verdict = decide(evidence, history, self.policy, fr_culprit_ranks=fr, node_health=notes)
        result = verdict.to_dict()
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        if persist:
            assert self.repo is not None and job_id is not None and cycle is not None
            self.repo.save_verdict(job_id, cycle, result, log_identity=identity)
            self.notify(
                VerdictEvent(
                    job_id=job_id,
                    cycle=cycle,
                    log_path=str(identity.get("path") or os.fspath(log_path)),
                    verdict=copy.deepcopy(verdict),
                    log_identity=dict(identity),
                    audit_dir=self.audit_dir,
                    analysis_ms=elapsed_ms,
                    extra=dict(extra or {}),
                    inputs=DecisionInputs(
                        prior_cycles=tuple(history),
                        policy=self.policy,
                        fr_culprit_ranks=None if fr is None else tuple(fr),
                        node_health=tuple(notes),
                    ),
                )
            )
        return verdict


@dataclass(frozen=True)
class NodeLog:
    """One node's log of a multi-node cycle, as handed to `analyze_nodes`."""

    node: str
    path: str
    group_rank: int | None = None


def scan_nodes(
    logs: Sequence[NodeLog],
    *,
    opener: Opener | None = None,
    hash_logs: bool = True,
    budget: AnalysisBudget | None = None,
) -> tuple[CycleEvidence, list[dict[str, Any]]]:
    """Scan every node's log of a cycle into one evidence (`restart_agent.nodes`); return it
    with each log's identity and place in the merged numbering. A log that cannot be read
    is listed with its `error` and left out. `budget`: one analysis budget for all the
    cycle's logs together (None: its defaults)."""
    scan = NodeScan(budget)
    out: list[dict[str, Any]] = []
    for nl in logs:
        entry: dict[str, Any] = {"node": nl.node, "group_rank": nl.group_rank, "path": nl.path}
        try:
            fd = opener(nl.path) if opener is not None else os.open(nl.path, os.O_RDONLY)
        except Exception as exc:  # noqa: BLE001 - gone, outside the roots, unreadable
            entry["error"] = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            out.append(entry)
            continue
        digest = hashlib.sha256() if hash_logs else None
        scan.start_node(nl.node)
        with os.fdopen(fd, "rb", buffering=0) as f:
            while chunk := f.read(CHUNK_SIZE):
                if digest is not None:
                    digest.update(chunk)
                scan.feed(chunk)
        entry["sha256"] = digest.hexdigest() if digest is not None else None
        out.append(entry)
    evidence = scan.finish()
    spans = {s.node: s for s in scan.spans()}
    for entry in out:
        span = spans.get(entry["node"])
        if span is not None:
            entry.update(size=span.bytes, first_line=span.first_line, lines=span.lines)
    return evidence, out


def _analyze_nodes(
    engine: AttributionEngine,
    job_id: str,
    cycle: int,
    logs: Sequence[NodeLog],
    *,
    expected: int | None = None,
    missing: Sequence[str] = (),
    previous: Mapping[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`AttributionEngine.analyze_nodes` (module level: keeps the class short)."""
    started = time.perf_counter()
    with engine.fact_keys.context(job_id, cycle):  # the keys the nodes' launchers handed over
        evidence, scanned = scan_nodes(
            logs, opener=engine.opener, hash_logs=engine.hash_logs, budget=engine.budget
        )
    unread = [e["node"] for e in scanned if "error" in e]
    history = engine.history(job_id, cycle)
    stored = engine.repo.get_cycle(job_id, cycle) if engine.repo is not None else None
    fr = _fr_ranks_of(stored)
    notes = _notes_of(stored)
    verdict = decide(evidence, history, engine.policy, fr_culprit_ranks=fr, node_health=notes)
    absent = sorted(set(missing) | set(unread))
    section: dict[str, Any] = {
        "expected": expected if expected is not None else len(logs) + len(set(missing)),
        "analysed": [e for e in scanned if "error" not in e],
        "missing": absent,
        "unreadable": [e for e in scanned if "error" in e],
    }
    saved = verdict  # the stored one says which nodes' logs it lacked (the event's does not)
    if absent:
        saved = dataclasses.replace(
            verdict,
            basis=(
                f"{verdict.basis} (node(s) {', '.join(absent)} did not report; "
                "decided without their logs)"
            ).strip(),
        )
    result = saved.to_dict()  # the stored JSON: the verdict and the sections below
    if previous is not None:  # a later node's log re-decided the cycle: the change is kept
        section["previous"] = {
            k: previous.get(k) for k in ("decision", "rule", "basis") if k in previous
        }
        section["previous"]["nodes"] = [
            e.get("node") for e in ((previous.get("cycle_nodes") or {}).get("analysed") or [])
        ]
    result["cycle_nodes"] = section
    if fr is not None:  # the Flight Recorder's culprits, joined with the log evidence
        lines = ([saved.primary] if saved.primary else []) + list(saved.evidence)
        joined: list[dict[str, Any]] = []
        for ev in lines:
            e = ev.to_dict()
            if ev.rank in set(fr) and e not in joined:
                joined.append(e)
        hangs = (saved.fan_out.launcher or {}).get("hangs") or []
        result["flight_recorder"] = {
            "culprit_ranks": list(fr),
            "source": ((stored.fr_findings or {}).get("source") if stored else None),
            "evidence": joined[:10],
            "primary_is_culprit": (saved.primary.rank if saved.primary else None) in set(fr),
            "hangs": [h for h in hangs if isinstance(h, dict) and h.get("rank") in set(fr)],
        }
    total = sum(int(e.get("size") or 0) for e in scanned)
    if engine.repo is not None:
        engine.repo.save_verdict(
            job_id, cycle, result, log_identity={"path": None, "size": total, "sha256": None}
        )
        paths = ",".join(str(e["path"]) for e in section["analysed"])
        engine.notify(
            VerdictEvent(
                job_id=job_id,
                cycle=cycle,
                log_path=paths,
                verdict=copy.deepcopy(verdict),
                log_identity={"path": None, "size": total, "sha256": None},
                audit_dir=engine.audit_dir,
                analysis_ms=(time.perf_counter() - started) * 1000.0,
                extra={**(extra or {}), "nodes": [e["node"] for e in section["analysed"]]},
                inputs=DecisionInputs(
                    prior_cycles=tuple(history),
                    policy=engine.policy,
                    fr_culprit_ranks=None if fr is None else tuple(fr),
                    node_health=tuple(notes),
                ),
            )
        )
    return result
