"""The service's running state: repository, engine, tracked logs, analysis pool, listeners.

`ServiceState` owns everything a request needs and nothing HTTP-specific: routes call
`submit_log`, `lookup_log`, `analyze`, ... and turn `ApiError`s into responses.
Analyses run on a bounded thread pool; identical concurrent requests for the same
(job, cycle) share one analysis (`Coalescer`); verdicts are cached in the database.
Everything that decides whether a (job, cycle) gets a new analysis (tracking the log,
joining the one in flight, reusing the stored verdict, starting one) runs under that
key's lock (`_key_lock`), so two identical requests never both start one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from relaunch import storage
from relaunch.attribution.core.engine import AttributionEngine, Listener, VerdictEvent
from relaunch.attribution.core.listeners import close_listeners, install_listeners
from relaunch.attribution.service.coalesce import Coalescer
from relaunch.attribution.service.confined import is_confined_file, open_confined
from relaunch.attribution.service.errors import ApiError, storage_refusal
from relaunch.attribution.service.gather import CycleGather
from relaunch.attribution.service.paths import confine
from relaunch.attribution.service.settings import ServiceSettings
from relaunch.attribution.service.tracker import TrackedLog
from relaunch.attribution.service.validation import (
    check_cycle,
    check_intent,
    check_job_id,
    default_job_id,
)
from relaunch.restart_agent.model import Verdict
from relaunch.storage import service_queries
from relaunch.storage.records import as_utc

log = logging.getLogger(__name__)

PROGRESSIVE_SLICE = 64 << 20  # bytes read per log per poll pass
KEY_LOCKS = 64  # striped per-(job, cycle) locks: bounded memory, rare false sharing


def recommendation(verdict: dict[str, Any] | None, error: str | None = None) -> dict[str, Any]:
    if verdict is None:
        return {
            "action": "UNKNOWN",
            "reason": error or "not analysed yet",
            "source": "deterministic",
        }
    v = Verdict.read(verdict)  # the stored or just-made JSON, read once
    if v is None:
        return {"action": "UNKNOWN", "reason": "", "source": "deterministic"}
    return {
        "action": str(v.decision),
        "reason": v.basis or "",
        "source": "llm" if v.llm.contributed else "deterministic",
    }


class ServiceState:
    """One service instance's state. Create with `ServiceState(settings)`, then `start()`."""

    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.started_at = time.time()
        self.repo = storage.open_repository(settings.db_url)
        # every read of a client-named file is confined to these (attribution.service.confined)
        assert settings.data_dir is not None
        self.upload_root = Path(os.path.realpath(settings.data_dir)) / "uploads"
        self.read_roots: tuple[Path, ...] = (*settings.allowed_roots, self.upload_root)
        self.engine = AttributionEngine(
            self.repo,
            policy=settings.policy,
            audit_dir=settings.audit_dir,
            opener=self.open_log,
            budget=settings.analysis_budget,
        )
        self.listeners: list[Listener] = []
        self._install_listeners()
        self.executor = ThreadPoolExecutor(
            max_workers=max(1, settings.analysis_workers), thread_name_prefix="relaunch-analysis"
        )
        self.coalescer = Coalescer(self.executor)
        self.gather = CycleGather(  # multi-node cycles: every node's log, one verdict
            self.repo,
            self.engine,
            self.executor,
            settings.allowed_roots,
            self.open_log,
            node_wait_s=settings.node_wait_s,
            data_dir=settings.data_dir,
        )
        self._lease_task: asyncio.Task[None] | None = None
        self._logs: OrderedDict[str, TrackedLog] = OrderedDict()  # normalized path -> log
        self._by_key: dict[tuple[str, int], TrackedLog] = {}
        self._lock = threading.Lock()
        self._key_locks = [threading.RLock() for _ in range(KEY_LOCKS)]
        self._poll_task: asyncio.Task[None] | None = None
        self.analyses = 0
        self.cache_hits = 0
        self._evicted_read = 0
        self._db_checked_at = float("-inf")
        self._db_error: str | None = None

    # --- lifecycle ---------------------------------------------------------------------
    def _install_listeners(self) -> None:
        s = self.settings
        self.listeners = install_listeners(
            self.engine,
            audit=s.audit_dir is not None,
            webhook_url=s.webhook_url,
            slack=s.slack,
            llm_config=s.llm_config,
            on_llm_result=self._after_enrichment,
        )

    def _after_enrichment(self, event: VerdictEvent, result: dict[str, Any]) -> None:
        """The LLM may have replaced the stored verdict: refresh the in-memory copy."""
        tl = self.tracked_key(event.job_id, event.cycle)
        rec = self.repo.get_cycle(event.job_id, event.cycle)
        if tl is not None and rec is not None and rec.verdict is not None:
            tl.verdict = rec.verdict

    async def start(self) -> None:
        if self.settings.resume_unfinished:
            await asyncio.to_thread(self.resume_unfinished)
        self._poll_task = asyncio.create_task(self._poll_loop())
        self._lease_task = asyncio.create_task(self._lease_loop())

    async def _lease_loop(self) -> None:
        """Record `lost` the jobs whose launchers all stopped renewing their leases."""
        timeout = self.settings.lease_timeout_s
        while True:
            await asyncio.sleep(self.settings.lease_sweep_every_s)
            try:
                lost = await asyncio.to_thread(self.gather.sweep, timeout)
            except Exception:
                log.exception("lease sweep failed")
                continue
            for job_id in lost:
                log.warning("job %s recorded lost: no launcher renewed its lease", job_id)

    def resume_unfinished(self) -> tuple[int, int]:
        """Resume every analysis a killed service left unfinished; return (resumed, failed).

        Runs before the service answers requests, so pollers find the resumed analyses in
        flight (`wait=true` waits for them). A cycle whose log is no longer readable inside
        the roots is marked failed with the reason (`analysis_error`), so `wait=false`
        pollers see it end instead of pending forever."""
        resumed = failed = 0
        for job_id, cycle, log_path in self.repo.unfinished_analyses():
            reason = None
            if not log_path:
                reason = "no log is known for the cycle"
            else:
                try:
                    os.close(self.open_log(log_path))
                except ApiError as exc:
                    reason = exc.message
            if reason is not None:
                self.repo.mark_analysis_failed(
                    job_id, cycle, f"analysis not resumed after a service restart: {reason}"
                )
                failed += 1
                continue
            tl = self.track(Path(log_path), job_id, cycle, intent="terminal")  # type: ignore[arg-type]
            self._remember(tl)
            self.analyze(tl, force=True, resumed=True)
            resumed += 1
        if resumed or failed:
            log.warning(
                "unfinished analyses after a restart: %d resumed, %d failed", resumed, failed
            )
        return resumed, failed

    async def stop(self) -> None:
        for task in (self._poll_task, self._lease_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self.gather.close()
        # running analyses finish; queued ones are dropped and stay recorded as requested,
        # so the next start resumes them (resume_unfinished) instead of delaying this stop
        self.executor.shutdown(wait=True, cancel_futures=True)
        self.engine.close(timeout=10.0)  # let queued listener events (audit files) finish
        close_listeners(self.listeners, lambda fn: log.exception("closing listener %r failed", fn))
        dispose = getattr(self.repo, "close", None)
        if callable(dispose):
            dispose()

    # --- health ------------------------------------------------------------------------
    def check_storage(self) -> None:
        """503 `storage_unavailable` when the database cannot keep a write now (its file
        deleted or replaced, the disk full, the directory read-only): refused before any
        work, so nothing is acknowledged that is not durable."""
        try:
            self.repo.check_durable()
        except Exception as exc:
            refusal = storage_refusal(exc)
            if refusal is not None:
                raise refusal from None
            raise

    def health(self) -> dict[str, Any]:
        """Health, with the database probe cached for a second (probes are frequent); the
        database file is checked on every call (a few syscalls)."""
        now = time.monotonic()
        try:
            self.repo.check_durable()
        except Exception as exc:  # noqa: BLE001 - any storage failure is the health answer
            return {"status": "fail", "issues": [f"storage unavailable: {exc}"]}
        if now - self._db_checked_at > 1.0:
            try:
                self.repo.get_job("healthz-probe")
                self._db_error = None
            except Exception as exc:  # noqa: BLE001 - any database failure is the health answer
                self._db_error = f"database unavailable: {type(exc).__name__}"
            self._db_checked_at = now
        if self._db_error is not None:
            return {"status": "fail", "issues": [self._db_error]}
        issues: list[str] = []
        status = "ok"
        pending = self.coalescer.inflight()
        if pending >= self.settings.max_pending_analyses:
            status, issues = "degraded", [f"analysis queue full ({pending} pending)"]
        for root in self.settings.allowed_roots:
            if not root.is_dir():
                status = "degraded"
                issues.append(f"allowed root is not a directory: {root}")
        if not self.settings.allowed_roots:
            issues.append("no --allowed-root: /logs accepts only uploads through /v1")
        return {"status": status, "issues": issues}

    def stats(self) -> dict[str, Any]:
        with self._lock:
            tracked = len(self._logs)
            bytes_read = self._evicted_read + sum(t.read_total for t in self._logs.values())
            progressive = sum(1 for t in self._logs.values() if t.intent == "progressive")
        out: dict[str, Any] = {
            "tracked_logs": tracked,
            "progressive_logs": progressive,
            "analyses_started": self.coalescer.started,
            "requests_coalesced": self.coalescer.joined,
            "analyses_inflight": self.coalescer.inflight(),
            "analyses_completed": self.analyses,
            "cache_hits": self.cache_hits,
            "bytes_read": bytes_read,
            "uptime_s": round(time.time() - self.started_at, 3),
        }
        for fn in self.listeners:
            st = getattr(fn, "stats", None)
            if st is not None and hasattr(st, "__dataclass_fields__"):
                out[f"listener_{type(fn).__name__}"] = dict(st.__dict__)
        return out

    # --- confined reads ------------------------------------------------------------------
    def open_log(self, path: str | os.PathLike[str]) -> int:
        """A descriptor of a client-named log, opened inside the roots (or an ApiError)."""
        return open_confined(path, self.read_roots)

    def log_readable(self, path: str | os.PathLike[str]) -> bool:
        return is_confined_file(path, self.read_roots)

    def track(self, path: Path, job_id: str, cycle: int, **kw: Any) -> TrackedLog:
        """A new TrackedLog whose reads are confined to the service's roots."""
        return TrackedLog(
            path=path,
            job_id=job_id,
            cycle=cycle,
            roots=self.read_roots,
            budget=self.settings.analysis_budget,
            **kw,
        )

    def _key_lock(self, key: tuple[str, int]) -> threading.RLock:
        """The lock serialising analysis decisions for (job, cycle) `key`."""
        return self._key_locks[hash(key) % KEY_LOCKS]

    # --- tracked logs --------------------------------------------------------------------
    def _remember(self, tl: TrackedLog) -> None:
        with self._lock:
            old = self._by_key.get(tl.key)
            if old is not None and str(old.path) != str(tl.path):
                self._logs.pop(str(old.path), None)
            prev = self._logs.pop(str(tl.path), None)
            if prev is not None and prev.key != tl.key:
                self._by_key.pop(prev.key, None)
            self._logs[str(tl.path)] = tl
            self._by_key[tl.key] = tl
            while len(self._logs) > self.settings.max_tracked_logs:
                # evict the oldest finished log first; never one being analysed
                victim = next(
                    (k for k, t in self._logs.items() if t.future is None or t.future.done()),
                    None,
                )
                if victim is None:
                    break
                gone = self._logs.pop(victim)
                self._evicted_read += gone.read_total
                self._by_key.pop(gone.key, None)

    def tracked(self, path: str) -> TrackedLog | None:
        with self._lock:
            return self._logs.get(path)

    def tracked_key(self, job_id: str, cycle: int) -> TrackedLog | None:
        with self._lock:
            return self._by_key.get((job_id, cycle))

    def _pick_cycle(self, job_id: str, path: Path) -> int:
        """Cycle for a submission without cycle_id: the path's earlier cycle, else the next."""
        rec = service_queries.find_cycle_by_log_path(self.repo, str(path))
        if rec is not None and rec[0] == job_id:
            return rec[1]
        with self._lock:
            mine = [c for (j, c) in self._by_key if j == job_id]
        stored = self.repo.next_cycle(job_id)
        return max([stored] + [c + 1 for c in mine])

    def submit_log(
        self,
        raw_path: str,
        *,
        user: str | None,
        job_id: str | None,
        cycle: int | None,
        intent: str,
        fact_key: str | None = None,
    ) -> dict[str, Any]:
        """POST /logs: register (and for `terminal`, start analysing) one cycle log.
        `fact_key`: the launcher's key of the cycle's facts (`attribution.core.fact_keys`)."""
        check_intent(intent)
        path = confine(raw_path, self.settings.allowed_roots, must_exist=intent == "terminal")
        if job_id is None:
            prev = self.tracked(str(path))
            job_id = prev.job_id if prev else default_job_id(path)
        check_job_id(job_id)
        if cycle is None:
            prev = self.tracked(str(path))
            cycle = prev.cycle if prev and prev.job_id == job_id else self._pick_cycle(job_id, path)
        check_cycle(cycle)
        # under the key's lock: concurrent identical submissions share one TrackedLog
        # (else each would get its own, and a poller could read one no analysis fills)
        with self._key_lock((job_id, cycle)):
            tl = self.tracked(str(path))
            if tl is None or tl.key != (job_id, cycle):
                conflict = self.repo.log_conflict(job_id, cycle, log_path=str(path))
                if conflict is not None:  # history is append-only (storage.repository)
                    raise ApiError("conflict", conflict)
                self.check_storage()
                tl = self.track(path, job_id, cycle, user=user, intent=intent)
                self._remember(tl)
                self.repo.register_cycle(job_id, cycle, str(path))
            elif intent != "track_only":
                tl.intent = intent
            if fact_key is not None:
                self.hand_over_fact_key(job_id, cycle, None, fact_key)
            if intent == "terminal":
                self.analyze(tl)
        return {
            "submitted": True,
            "normalized_path": str(path),
            "job_id": job_id,
            "cycle_id": cycle,
            "analysis_intent": intent,
            "mode": "SINGLE",
            "status": tl.status(),
        }

    def hand_over_fact_key(self, job_id: str, cycle: int, node: str | None, text: str) -> None:
        """Keep a launcher's fact key for the cycle (409 `conflict` for a different one)."""
        from relaunch.attribution.core.fact_keys import KeyConflict, parse_key

        try:
            self.engine.fact_keys.add(job_id, cycle, node, parse_key(text))
        except KeyConflict as exc:
            raise ApiError("conflict", str(exc)) from None
        except ValueError as exc:
            raise ApiError("invalid_parameter", str(exc)) from None

    # --- analysis ------------------------------------------------------------------------
    def _check_capacity(self) -> None:
        if self.coalescer.inflight() >= self.settings.max_pending_analyses:
            raise ApiError(
                "overloaded",
                "too many analyses pending; retry later",
                headers={"Retry-After": "1"},
            )

    def analyze(
        self,
        tl: TrackedLog,
        *,
        force: bool = False,
        resumed: bool = False,
    ) -> Future[dict[str, Any]]:
        """Start (or join) the analysis of `tl`; returns the future of its verdict.

        A new analysis is recorded in the history before it starts
        (`mark_analysis_requested`), so a service killed meanwhile resumes it on its next
        start (`resumed=True`: such analyses are not refused for capacity).

        The join / cached-verdict / start decision is made under the key's lock: without
        it a request could miss the stored verdict while another's analysis was still
        running, then find nothing in flight because that analysis had just finished,
        and start a second analysis of the unchanged log."""
        with self._key_lock(tl.key):
            return self._analyze_locked(tl, force, resumed)

    def _analyze_locked(self, tl: TrackedLog, force: bool, resumed: bool) -> Future[dict[str, Any]]:
        running = self.coalescer.join(tl.key)
        if running is not None:
            return running
        if not resumed:
            self._check_capacity()
        if not force:
            cached = self._cached_verdict(tl)
            if cached is not None:
                fut: Future[dict[str, Any]] = Future()
                fut.set_result(cached)
                tl.future, tl.verdict, tl.error, tl.cached = fut, cached, None, True
                self.cache_hits += 1
                return fut
        tl.verdict, tl.error, tl.cached = None, None, False
        if not resumed:
            self.repo.mark_analysis_requested(tl.job_id, tl.cycle)
        fut, _ = self.coalescer.submit(tl.key, lambda: self._run_analysis(tl))
        tl.future = fut
        return fut

    def _cached_verdict(self, tl: TrackedLog) -> dict[str, Any] | None:
        """The stored verdict, if the log is unchanged since it was analysed."""
        rec = self.repo.get_cycle(tl.job_id, tl.cycle)
        if rec is None or rec.verdict is None or rec.analysed_at is None:
            return None
        if rec.log_path != str(tl.path) or rec.log_size is None:
            return None
        try:
            fd = self.open_log(tl.path)
        except ApiError:
            return rec.verdict  # the log is gone (or unreachable): history is all there is
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        analysed = as_utc(rec.analysed_at).timestamp()  # type: ignore[union-attr]
        if st.st_size == rec.log_size and st.st_mtime <= analysed:
            return rec.verdict
        return None

    def _run_analysis(self, tl: TrackedLog) -> dict[str, Any]:
        try:
            return self._analyse(tl)
        except BaseException as exc:
            reason = tl.error or getattr(exc, "message", None) or f"{type(exc).__name__}"
            try:
                self.repo.mark_analysis_failed(tl.job_id, tl.cycle, reason)
            except Exception:  # the database is down: the next start resumes it instead
                log.exception("could not record the failed analysis of %s", tl.path)
            raise

    def _analyse(self, tl: TrackedLog) -> dict[str, Any]:
        try:  # the engine reads the FR ranks and node-health records stored with the cycle
            hold = self.settings.analysis_hold
            if hold is not None:
                hold(tl.job_id)
            t0 = time.perf_counter()
            keys = self.engine.fact_keys
            with tl.lock, keys.context(tl.job_id, tl.cycle):  # a scan made now checks facts
                evidence, identity = tl.finish()
                checked = tl.scan_keys == keys.keys(tl.job_id, tl.cycle)
            scan_s = time.perf_counter() - t0
            verdict = self._decide_and_save(tl, evidence, identity, scan_s, checked)
            tl.verdict = verdict
            self.analyses += 1
            return verdict
        except FileNotFoundError:
            tl.error = f"log file not found: {tl.path}"
            raise ApiError("not_found", tl.error) from None
        except PermissionError:
            tl.error = f"log file is not readable: {tl.path}"
            raise ApiError("unreadable", tl.error) from None
        except ApiError:
            raise
        except Exception as exc:
            log.exception("analysis of %s failed", tl.path)
            tl.error = f"analysis failed: {type(exc).__name__}: {exc}"
            raise

    def _decide_and_save(
        self,
        tl: TrackedLog,
        evidence: Any,
        identity: dict[str, Any],
        scan_s: float,
        facts_checked: bool = False,
    ) -> dict[str, Any]:
        """The engine's decide/save/notify steps, on evidence that was read incrementally.

        Returns the verdict's JSON form: the tracker keeps what the HTTP routes answer,
        which is also what a restart reads back from the database (`cached_verdict`)."""
        return self.engine.analyze_cycle(
            tl.job_id,
            tl.cycle,
            str(tl.path),
            evidence=evidence,
            log_identity=identity,
            facts_checked=facts_checked,
            extra={
                "incremental": True,
                "resets": tl.resets,
                "scan_ms": round(scan_s * 1000.0, 3),
            },
        ).to_dict()

    async def _poll_loop(self) -> None:
        """Read new bytes of every progressive log, a bounded slice per log per pass."""
        while True:
            await asyncio.sleep(self.settings.progressive_poll_s)
            with self._lock:
                todo = [
                    t for t in self._logs.values() if t.intent == "progressive" and t.future is None
                ]
            if todo:
                await asyncio.to_thread(self._feed_all, todo)

    def _feed_all(self, todo: list[TrackedLog]) -> None:
        for tl in todo:
            if tl.future is not None or not tl.lock.acquire(blocking=False):
                continue  # being analysed right now: the analysis reads the tail
            try:
                tl.feed_new(PROGRESSIVE_SLICE)
            except (OSError, ApiError) as exc:
                log.debug("progressive read of %s: %s", tl.path, exc)
            finally:
                tl.lock.release()

    def feed_now(self, tl: TrackedLog) -> int:
        """Read what is new in `tl` right away (uploads call this after each chunk)."""
        with tl.lock:
            return tl.feed_new()

    # --- lookups -------------------------------------------------------------------------
    def find_by_path(self, path: Path) -> TrackedLog | None:
        """A tracked log, or one rebuilt from history (after a restart of the service)."""
        tl = self.tracked(str(path))
        if tl is not None:
            return tl
        rec = service_queries.find_cycle_by_log_path(self.repo, str(path))
        if rec is None:
            return None
        job_id, cycle = rec
        tl = self.track(path, job_id, cycle, intent="track_only")
        stored = self.repo.get_cycle(job_id, cycle)
        if stored is not None and stored.verdict is not None:
            tl.verdict, tl.cached = stored.verdict, True
        elif stored is not None and stored.analysis_requested_at is None:
            tl.error = stored.analysis_error  # its analysis failed (or was not resumed)
        self._remember(tl)
        return tl

    def cycle_log(self, job_id: str, cycle: int) -> TrackedLog | None:
        tl = self.tracked_key(job_id, cycle)
        if tl is not None:
            return tl
        rec = self.repo.get_cycle(job_id, cycle)
        if rec is None or not rec.log_path:
            return None
        tl = self.track(Path(rec.log_path), job_id, cycle)
        if rec.verdict is not None:
            tl.verdict, tl.cached = rec.verdict, True
        elif rec.analysis_requested_at is None:
            tl.error = rec.analysis_error  # its analysis failed (or was not resumed)
        self._remember(tl)
        return tl
