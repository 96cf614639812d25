"""Multi-node cycles in the service: every node's log of a cycle, analysed once together.

Each launcher of a multi-node job registers its own log for (job, cycle)
(`register`: stored per node, never overwritten) and reports when its part of the cycle
ended (`end`: the log's size and SHA-256 are taken then). The cycle is analysed once, over
all nodes' logs (`AttributionEngine.analyze_nodes`), as soon as every expected node has
ended, or `node_wait_s` after the first node's end (the nodes that never reported are named
in the verdict). A node that ends after that re-decides the cycle with its log; the
previous decision is kept in the verdict (`cycle_nodes.previous`). Every node reads the
same verdict (`status`), so one decision holds on every node.

Memory: a cycle's state is kept while it is in use; once its analysis succeeded (the verdict
is in the history) it is retired, and only the newest `max_finished` retired cycles stay in
memory: an older one is answered from the history (`status`), as after a service restart.

Leases: `sweep()` records `lost` the jobs whose launchers all stopped renewing
(`storage.node_logs.expire_leases`); the service runs it every few seconds.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
import time
from collections import OrderedDict
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relaunch.attribution.core.engine import CHUNK_SIZE, AttributionEngine, NodeLog
from relaunch.attribution.service.errors import ApiError
from relaunch.attribution.service.paths import confine, confine_dir
from relaunch.storage import node_logs
from relaunch.storage.repository import HistoryRepository

log = logging.getLogger(__name__)

MAX_FINISHED = 1024  # retired cycles kept in memory (each holds its verdict)


@dataclass
class _Gather:
    expected: int | None = None
    first_end: float | None = None
    timer: threading.Timer | None = None
    future: Future[dict[str, Any]] | None = None
    analysed_nodes: frozenset[str] = frozenset()
    rerun: bool = False  # a node ended while the analysis ran: decide again after it
    wanted: bool = False  # a node asked for the verdict (else the cycle is not analysed)
    error: str | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)


class CycleGather:
    """See the module docstring; one per service."""

    def __init__(
        self,
        repo: HistoryRepository,
        engine: AttributionEngine,
        executor: Executor,
        allowed_roots: list[Path],
        opener: Any,
        *,
        node_wait_s: float = 60.0,
        data_dir: str | Path | None = None,
        max_finished: int = MAX_FINISHED,
    ) -> None:
        self.repo = repo
        self.engine = engine
        self.executor = executor
        self.allowed_roots = allowed_roots
        self.opener = opener
        self.node_wait_s = node_wait_s
        self.data_dir = data_dir  # where nodes' uploaded Flight Recorder dumps are stored
        self.max_finished = max(1, max_finished)
        self._cycles: dict[tuple[str, int], _Gather] = {}
        # retired cycles, oldest first: only these are ever evicted from `_cycles`
        self._finished: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._lock = threading.Lock()

    def _state(self, key: tuple[str, int]) -> _Gather:
        """The cycle's state, in use from now on: taken off the retired list, so it cannot
        be evicted while a request or an analysis works on it (one evicted before is made
        afresh, as after a service restart)."""
        with self._lock:
            self._finished.pop(key, None)
            g = self._cycles.get(key)
            if g is None:
                g = self._cycles[key] = _Gather()
            return g

    def _retire_if_done(self, key: tuple[str, int], g: _Gather, *, all_ended: bool) -> None:
        """With `g.lock` held: a cycle that waits for nothing (its analysis succeeded and
        its verdict is stored, or every node ended and none asked for a verdict) is retired;
        the oldest retired beyond `max_finished` leave memory. A failed analysis stays (its
        error is only here)."""
        f = g.future
        if g.timer is not None or g.rerun:
            return
        if f is None and (g.wanted or not all_ended):
            return
        if f is not None and (not f.done() or f.exception() is not None):
            return
        with self._lock:
            if self._cycles.get(key) is not g:
                return
            self._finished[key] = None
            while len(self._finished) > self.max_finished:
                old, _ = self._finished.popitem(last=False)
                self._cycles.pop(old, None)

    # -- requests ----------------------------------------------------------------------
    def register(
        self,
        job_id: str,
        cycle: int,
        node: str,
        raw_path: str,
        *,
        nodes: int | None,
        group_rank: int | None,
        host: str | None,
        fr_dir: str | None = None,
    ) -> dict[str, Any]:
        path = confine(raw_path, self.allowed_roots, must_exist=False)
        fr = (
            None
            if fr_dir is None
            else str(confine_dir(fr_dir, self.allowed_roots, must_exist=False))
        )
        try:
            rec = node_logs.register_node_log(
                self.repo,
                job_id,
                cycle,
                node,
                str(path),
                group_rank=group_rank,
                nodes_expected=nodes,
                host=host,
                fr_dir=fr,
            )
        except node_logs.NodeLogConflict as exc:
            raise ApiError("conflict", str(exc)) from None
        except ValueError as exc:
            raise ApiError("invalid_parameter", str(exc)) from None
        g = self._state((job_id, cycle))
        with g.lock:
            if nodes is not None:
                g.expected = max(g.expected or 0, nodes)
        return {"job_id": job_id, "cycle": cycle, **rec.to_dict()}

    def end(
        self, job_id: str, cycle: int, node: str, outcome: str | None, *, analyse: bool = True
    ) -> dict[str, Any]:
        """`node`'s part of the cycle ended: identity recorded; maybe analyse now."""
        logs = node_logs.node_logs(self.repo, job_id, cycle)
        mine = next((r for r in logs if r.node == node), None)
        if mine is None:
            raise ApiError(
                "not_found", f"job {job_id} cycle {cycle}: node {node} registered no log"
            )
        size, digest = self._identity(mine.log_path)
        node_logs.end_node_log(
            self.repo, job_id, cycle, node, outcome=outcome, size=size, sha256=digest
        )
        key = (job_id, cycle)
        g = self._state(key)
        logs = node_logs.node_logs(self.repo, job_id, cycle)
        ended = {r.node for r in logs if r.ended_at is not None}
        expected = max([g.expected or 0] + [r.nodes_expected or 0 for r in logs] + [len(logs)])
        with g.lock:
            g.expected = expected
            g.wanted = g.wanted or analyse
            if g.first_end is None:
                g.first_end = time.monotonic()
            if not g.wanted:
                pass  # no node asked for a verdict (stopped by one, succeeded): none made
            elif g.future is not None and node in g.analysed_nodes:
                pass  # its log was in the analysis already
            elif len(ended) >= expected:
                self._start(key, g)
            elif g.future is not None and g.future.done():
                self._start(key, g)  # a late node: decide again with its log
            elif g.future is not None:
                g.rerun = True  # after the analysis running now, with this log too
            elif g.timer is None:
                g.timer = threading.Timer(self.node_wait_s, self._timeout, args=(key,))
                g.timer.daemon = True
                g.timer.start()
            self._retire_if_done(key, g, all_ended=len(ended) >= expected)
        return self.status(job_id, cycle)

    def _identity(self, path: str) -> tuple[int | None, str | None]:
        try:
            fd = self.opener(path)
        except Exception:  # noqa: BLE001 - the opener's refusal (confined: an ApiError): no identity
            return None, None
        h = hashlib.sha256()
        size = 0
        with os.fdopen(fd, "rb", buffering=0) as f:
            while chunk := f.read(CHUNK_SIZE):
                h.update(chunk)
                size += len(chunk)
        return size, h.hexdigest()

    def _timeout(self, key: tuple[str, int]) -> None:
        g = self._state(key)
        with g.lock:
            g.timer = None
            if g.future is None:
                self._start(key, g)

    def _start(self, key: tuple[str, int], g: _Gather) -> None:
        """With `g.lock` held: analyse the cycle now (all the logs reported so far)."""
        if g.timer is not None:
            g.timer.cancel()
            g.timer = None
        job_id, cycle = key
        logs = node_logs.node_logs(self.repo, job_id, cycle)
        ended = [r for r in logs if r.ended_at is not None]
        g.analysed_nodes = frozenset(r.node for r in ended)
        missing = sorted({r.node for r in logs} - g.analysed_nodes)
        expected = g.expected or len(logs)
        # nodes never registered are unnamed: count them
        unknown = max(0, expected - len(logs))
        missing += [f"(unregistered {i + 1} of {unknown})" for i in range(unknown)]
        previous = None
        rec = self.repo.get_cycle(job_id, cycle)
        if rec is not None and rec.verdict is not None and "cycle_nodes" in rec.verdict:
            previous = rec.verdict  # decided before (also by an earlier service process)
        g.rerun = False
        todo = [NodeLog(r.node, r.log_path, r.group_rank) for r in ended]
        g.error = None

        fr_dirs = sorted({r.fr_dir for r in ended if r.fr_dir})

        def run() -> dict[str, Any]:
            try:
                self._flight_recorder(job_id, cycle, fr_dirs)
                return self.engine.analyze_nodes(
                    job_id,
                    cycle,
                    todo,
                    expected=expected,
                    missing=missing,
                    previous=previous,
                    extra={"reason": "late_node" if previous is not None else "nodes"},
                )
            except Exception as exc:
                log.exception("analysis of %s cycle %s (nodes) failed", job_id, cycle)
                g.error = f"analysis failed: {type(exc).__name__}: {exc}"
                raise

        g.future = self.executor.submit(run)
        g.future.add_done_callback(lambda _: self._after(key))

    def _after(self, key: tuple[str, int]) -> None:
        """An analysis finished: a node that ended meanwhile gets its log decided in."""
        g = self._state(key)
        with g.lock:
            if g.rerun and g.future is not None and g.future.done():
                self._start(key, g)
            else:
                self._retire_if_done(key, g, all_ended=True)

    def _flight_recorder(self, job_id: str, cycle: int, dirs: list[str]) -> None:
        """Analyse the Flight Recorder dumps of the cycle: those the nodes' launchers
        uploaded (`POST .../nodes/{node}/fr`, in the service's data dir) and those in the
        folders they registered (re-checked inside the allowed roots). The restricted reader
        and its size bounds apply to both; the findings are stored and the analysis uses
        their culprits."""
        from relaunch.attribution import fr as fr_mod
        from relaunch.attribution.fr.reader import MAX_DUMP_BYTES
        from relaunch.attribution.service import fr_uploads
        from relaunch.attribution.service.confined import open_confined
        from relaunch.restart_agent.safe_files import read_fd_bounded

        def own(path: str) -> int:  # a file the service wrote: never through a link
            return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)

        def confined(path: str) -> int:
            return open_confined(path, self.allowed_roots)

        sources: list[tuple[Path, Any]] = []
        if self.data_dir is not None:
            sources += [(d, own) for d in fr_uploads.node_dirs(self.data_dir, job_id, cycle)]
        for d in dirs:
            try:
                sources.append((confine_dir(d, self.allowed_roots, must_exist=True), confined))
            except (ApiError, OSError):
                continue  # gone, or a link out of the roots
        with tempfile.TemporaryDirectory(prefix="relaunch-fr-") as copy:
            # each dump is opened without following any symlink (a folder swapped for a link
            # after the check is refused) and copied, bounded, into a folder of the
            # service's own, which the reader then reads
            copied = 0
            for where, opener in sources:
                try:
                    names = sorted(p.name for p in where.iterdir() if p.name.startswith("rank_"))
                except OSError:
                    continue
                for name in names:
                    target = Path(copy) / name
                    if target.exists():
                        continue  # the same rank's dump from two folders: the first counts
                    try:
                        fd = opener(str(where / name))
                    except (ApiError, OSError):
                        continue
                    try:
                        target.write_bytes(read_fd_bounded(fd, MAX_DUMP_BYTES, name))
                        copied += 1
                    except (OSError, ValueError):
                        continue
                    finally:
                        os.close(fd)
            if not copied:
                return
            try:
                findings = fr_mod.analyze_paths([copy], workers=1)
            except (ValueError, OSError) as exc:  # nothing readable: the logs decide alone
                log.warning("flight recorder dumps of %s cycle %s unusable: %s", job_id, cycle, exc)
                return
        findings["source"] = "launcher"
        self.engine.store_fr_findings(job_id, cycle, findings)

    # -- reads ----------------------------------------------------------------------------
    def status(self, job_id: str, cycle: int) -> dict[str, Any]:
        """`waiting` (for nodes), `pending` (analysing), `completed` or `failed`."""
        logs = node_logs.node_logs(self.repo, job_id, cycle)
        with self._lock:
            g = self._cycles.get((job_id, cycle))
        verdict = None
        status = "waiting"
        error = None
        if g is not None and g.future is not None:
            if not g.future.done():
                status = "pending"
            elif g.future.exception() is not None:
                status, error = "failed", g.error
            else:
                status, verdict = "completed", g.future.result()
        elif g is None:
            rec = self.repo.get_cycle(job_id, cycle)
            if rec is not None and rec.verdict is not None and "cycle_nodes" in rec.verdict:
                status, verdict = "completed", rec.verdict  # a restarted service
        return {
            "job_id": job_id,
            "cycle": cycle,
            "status": status,
            "expected": g.expected if g is not None else None,
            "logs": [r.to_dict() for r in logs],
            "verdict": verdict,
            "error": error,
        }

    def sweep(self, lease_timeout_s: float) -> list[str]:
        """Record `lost` the jobs whose launchers all stopped renewing their leases."""
        return node_logs.expire_leases(self.repo, lease_timeout_s)

    def close(self) -> None:
        with self._lock:
            timers = [g.timer for g in self._cycles.values() if g.timer is not None]
        for t in timers:
            t.cancel()
