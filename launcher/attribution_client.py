"""The launcher's attribution client: register cycle logs, request analyses, collect verdicts.

Four implementations behind one interface, chosen by `--ft-attribution-endpoint`:

- `embedded` (default): `attribution.core.engine.AttributionEngine` over
  `storage.open_repository(URL)` (SQLite) in a background thread of the launcher process.
- `http://host:port` and `unix:///path`: the NVRx-compatible API of `relaunch serve`
  (`POST /logs {log_path, job_id, cycle_id, analysis_intent}`, then
  `GET /logs?log_path=...&wait=false` until `status == "completed"`).
- `off`: nothing.

No call blocks the restart path: `register`, `request_analysis`, `report_node_health`,
`end_cycle` and `end_job` only queue work for one background thread, which delivers each
verdict to the `on_verdict` callback (a cycle decided again after a node-health report is
delivered once more, with `redecided=True`). Any failure (endpoint unreachable, engine
error) becomes a RESTART verdict with `source="fallback"` and a warning: never a crash,
never a STOP.

Nothing queued is dropped on exit: each task carries a time budget (a write: seconds; an
analysis: sized to its log), and `drain()`/`close()` wait for the budgets of the work
still queued, so a job that fails in its first second still leaves its job row, cycles
and end in the history; only work past its budget is abandoned, with a warning. The
thread is hand-made, not an `attribution.core.background.BackgroundQueue`: a task waits
at a gate (closed while workers restart, some tasks skip it) and the queue's wait is
measured in the tasks' time budgets, neither of which a plain queue loop has.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import socket
import stat
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from relaunch.attribution.core.engine import AttributionEngine, VerdictEvent
    from relaunch.restart_agent.model import Verdict


@dataclass(frozen=True)
class VerdictInfo:
    """One cycle's verdict as the launcher uses it."""

    cycle: int
    # "STOP" | "RESTART": a `restart_agent.model.Decision` in embedded mode, a plain string
    # from HTTP (the HTTP client does not import the agent: ~150 ms at launcher start)
    decision: str
    reason: str
    rule: str | None = None
    source: str = "embedded"  # embedded | http | fallback
    raw: dict[str, Any] = field(default_factory=dict)
    redecided: bool = False  # the cycle was decided again after its first verdict


GATE_MAX_S = 10.0  # longest the analysis waits for a (re)start in progress
WRITE_BUDGET_S = 30.0  # a history write (register, end, health): the database may be busy
MAX_DUMP_UPLOAD = 256 << 20  # a larger file in the dump folder is not a dump: not sent
OPEN_BUDGET_S = 120.0  # opening and migrating the embedded database
ANALYSIS_BASE_S = 30.0  # an analysis: this, plus its log at ANALYSIS_BYTES_PER_S
LEASE_RENEW_S = 5.0  # longest time between two lease renewals (the service may ask for less)
ANALYSIS_BYTES_PER_S = 5e6  # far below the scanner's speed (~75 MB/s): a safe bound


def analysis_budget(log_path: str) -> float:
    """Seconds an analysis of `log_path` may take before it is given up at exit."""
    try:
        size = os.path.getsize(log_path)
    except OSError:
        size = 0
    return ANALYSIS_BASE_S + size / ANALYSIS_BYTES_PER_S


OnVerdict = Callable[[VerdictInfo], None]
OnWarning = Callable[[str], None]


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


class AttributionClient:
    """Base: a queue of tasks run in order by one daemon thread."""

    name = "off"

    def __init__(self, on_verdict: OnVerdict, on_warning: OnWarning) -> None:
        self.on_verdict = on_verdict
        self.on_warning = on_warning
        self._tasks: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._pending = 0
        self._queued_budget = 0.0  # seconds of budget of the tasks not started yet
        self._running_until: float | None = None  # deadline of the task running now
        self._skip_analyses = False
        self._abandoned = False  # a second signal: stop waiting for queued work
        self._cond = threading.Condition()
        # node-health records not yet sent, per (job, cycle): sent before that cycle's
        # analysis (so its first verdict records them) or on their own after it
        self._health: dict[tuple[str, int], list[dict[str, Any]]] = {}
        # (job, cycle) -> (this node's group rank, the cycle's node count), from register
        self._cycle_nodes: dict[tuple[str, int], tuple[int | None, int | None]] = {}
        self._fr_dirs: dict[tuple[str, int], str] = {}  # where the cycle's FR dumps go
        self._analyse: dict[tuple[str, int], bool] = {}  # this node asks for the verdict
        # The gate keeps analysis off the restart path: closed while workers are being
        # (re)started, opened once they run. A closed gate delays work by at most GATE_MAX_S.
        self._gate = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="relaunch-attribution", daemon=True)
        self._thread.start()

    # -- public, non-blocking -------------------------------------------------
    def register(
        self,
        job_id: str,
        cycle: int,
        log_path: str,
        node: int | None,
        nodes: int | None = None,
        *,
        fr_dir: str | None = None,
    ) -> None:
        """A cycle started writing `log_path`; `node`: this launcher's group rank and
        `nodes`: how many nodes the cycle has (multi-node jobs; None on a single node)."""
        at = _utcnow()  # when the cycle started, not when the queue got to it
        with self._cond:
            self._cycle_nodes[(job_id, cycle)] = (node, nodes)
            if fr_dir is not None:
                self._fr_dirs[(job_id, cycle)] = fr_dir
        self._submit(lambda: self._register(job_id, cycle, log_path, node, at))

    def request_analysis(self, job_id: str, cycle: int, log_path: str, node: int | None) -> None:
        self._submit(
            lambda: self._analyze_safely(job_id, cycle, log_path, node),
            budget=self._analysis_budget(log_path),
            analysis=True,
        )

    def end_cycle(
        self, job_id: str, cycle: int, outcome: str, reason: str | None, *, analyse: bool = False
    ) -> None:
        """Record how a cycle ended: succeeded | failed | stopped | interrupted. `analyse`:
        this node asks for the cycle's verdict (a multi-node cycle is analysed when a node
        asked; one stopped by a verdict or that succeeded everywhere is not)."""
        at = _utcnow()
        with self._cond:
            self._analyse[(job_id, cycle)] = analyse

        def end() -> None:
            self._end_cycle(job_id, cycle, outcome, reason, at)

        self._submit(lambda: self._record_safely(f"end of cycle {cycle}", end))

    def end_job(self, job_id: str, state: str, exit_code: int, reason: str | None) -> None:
        """Record the job's final state (succeeded | failed | stopped | interrupted)."""
        self._submit(
            lambda: self._record_safely(
                "end of the job", lambda: self._end_job(job_id, state, exit_code, reason)
            ),
            gated=False,
        )

    def stored_next_cycle(self, job_id: str) -> Future[int | None]:
        """The job's next cycle number after the endpoint's stored history (None: unknown)."""
        fut: Future[int | None] = Future()

        def task() -> None:
            try:
                fut.set_result(self._next_cycle(job_id))
            except Exception as exc:  # noqa: BLE001 - any failure reading history is a warning, never a crash
                self.on_warning(
                    f"stored history of job {job_id} not readable ({self.name}): "
                    f"{type(exc).__name__}: {exc}"
                )
                fut.set_result(None)

        self._submit(task, gated=False)
        return fut

    def report_node_health(self, job_id: str, cycle: int, record: dict[str, Any]) -> None:
        """A node failed (or passed) its health check at the end of `cycle`: record it with
        that cycle's verdict (sent before the cycle's analysis when that is still queued)."""
        with self._cond:
            self._health.setdefault((job_id, cycle), []).append(dict(record))
        self._submit(lambda: self._send_health(job_id, cycle, redecided=True), gated=False)

    def start_lease(self, job_id: str, node: int | None) -> None:
        """Renew a lease on the job while this launcher runs (HTTP endpoints only)."""

    def hold(self) -> None:
        """Workers are being (re)started: keep the analysis thread quiet."""
        self._gate.clear()

    def release(self) -> None:
        """Workers run: the analysis thread may work."""
        self._gate.set()

    def budget_left(self) -> float:
        """Seconds the queued and running work may still take (the sum of their budgets)."""
        with self._cond:
            return self._time_left()

    def drain(self, timeout: float | None = None) -> bool:
        """Wait for the queued work (when the job is over): up to `timeout` s, or by
        default as long as the budgets of the work still queued allow. False: work is left."""
        self.release()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._pending:
                left = self._time_left() if deadline is None else deadline - time.monotonic()
                if left <= 0 or self._abandoned:
                    return False
                self._cond.wait(min(left, 0.5))
        return True

    def abandon(self) -> None:
        """Stop waiting for queued work (safe in a signal handler: sets flags only)."""
        self._abandoned = True
        self._skip_analyses = True

    def skip_analyses(self) -> None:
        """Queued analyses are dropped (the job was interrupted); records are still written."""
        self._skip_analyses = True

    def close(self) -> bool:
        """Flush the queued work within its budgets, then stop the thread. False (and a
        warning) when some work was abandoned."""
        done = self.drain()
        self._tasks.put(None)
        if done:
            self._thread.join(max(1.0, self.budget_left()))
        if not done:
            with self._cond:
                left = self._pending
            self.on_warning(f"{left} attribution task(s) abandoned at exit: over their time budget")
        return done

    # -- to implement ---------------------------------------------------------
    def _register(
        self, job_id: str, cycle: int, log_path: str, node: int | None, at: datetime
    ) -> None:
        """Tell the endpoint a cycle log exists (best effort); `at`: when it started."""

    def _analyze(self, job_id: str, cycle: int, log_path: str, node: int | None) -> VerdictInfo:
        raise NotImplementedError

    def _analysis_budget(self, log_path: str) -> float:
        return analysis_budget(log_path)

    def _end_cycle(
        self, job_id: str, cycle: int, outcome: str, reason: str | None, at: datetime
    ) -> None:
        """Record the end of a cycle (best effort); `at`: when it ended."""

    def _end_job(self, job_id: str, state: str, exit_code: int, reason: str | None) -> None:
        """Record the job's final state (best effort)."""

    def _next_cycle(self, job_id: str) -> int | None:
        """The next cycle number after the stored history, None when there is none."""
        return None

    def _record_health(self, job_id: str, cycle: int, record: dict[str, Any]) -> VerdictInfo | None:
        """Store a node-health record with the cycle; return the re-decided verdict, if any."""
        return None

    # -- machinery ------------------------------------------------------------
    def _submit(
        self,
        task: Callable[[], None],
        *,
        gated: bool = True,
        budget: float = WRITE_BUDGET_S,
        analysis: bool = False,
    ) -> None:
        with self._cond:
            self._pending += 1
            self._queued_budget += budget
        self._tasks.put(_Task(task, gated, budget, analysis))

    def _time_left(self) -> float:
        """Like `budget_left`, with the condition already held."""
        running = 0.0
        if self._running_until is not None:
            running = max(0.0, self._running_until - time.monotonic())
        return running + self._queued_budget

    def _loop(self) -> None:
        while True:
            item = self._tasks.get()
            if item is None:
                return
            with self._cond:
                self._queued_budget = max(0.0, self._queued_budget - item.budget)
                self._running_until = time.monotonic() + item.budget
            try:
                if item.gated:
                    self._gate.wait(GATE_MAX_S)
                if not (item.analysis and self._skip_analyses):
                    item.run()
            except Exception as exc:  # noqa: BLE001 - a bug in a task must not kill the thread
                self.on_warning(f"attribution task failed: {type(exc).__name__}: {exc}")
            finally:
                with self._cond:
                    self._running_until = None
                    self._pending -= 1
                    self._cond.notify_all()

    def _record_safely(self, what: str, write: Callable[[], None]) -> None:
        try:
            write()
        except Exception as exc:  # noqa: BLE001 - a failed record is a warning; the job goes on
            self.on_warning(f"{what} not recorded ({self.name}): {type(exc).__name__}: {exc}")

    def _send_health(self, job_id: str, cycle: int, *, redecided: bool) -> None:
        """Send the queued health records of (job, cycle); publish a re-decided verdict."""
        with self._cond:
            records = self._health.pop((job_id, cycle), [])
        for record in records:
            try:
                verdict = self._record_health(job_id, cycle, record)
            except Exception as exc:  # noqa: BLE001 - an unconfirmed report is a warning; the job goes on
                self.on_warning(
                    f"node health report for cycle {cycle} not confirmed ({self.name}): "
                    f"{type(exc).__name__}: {exc}"
                )
                continue
            if verdict is not None and redecided:
                self.on_verdict(dataclasses.replace(verdict, redecided=True))

    def _analyze_safely(self, job_id: str, cycle: int, log_path: str, node: int | None) -> None:
        self._send_health(job_id, cycle, redecided=False)  # the analysis below includes them
        try:
            verdict = self._analyze(job_id, cycle, log_path, node)
        except Exception as exc:  # noqa: BLE001 - any analysis failure falls back to RESTART
            msg = f"attribution ({self.name}) failed for cycle {cycle}: {type(exc).__name__}: {exc}"
            self.on_warning(msg + "; treating as RESTART")
            verdict = VerdictInfo(cycle, "RESTART", f"no verdict ({msg})", None, "fallback")
        self.on_verdict(verdict)


@dataclass(frozen=True)
class _Task:
    run: Callable[[], None]
    gated: bool  # waits for the gate (analysis off the restart path)
    budget: float  # seconds it may take before it is abandoned at exit
    analysis: bool = False


class OffClient(AttributionClient):
    """`--ft-attribution-endpoint off`: no analysis; the restart budget alone decides."""

    name = "off"

    def request_analysis(self, job_id: str, cycle: int, log_path: str, node: int | None) -> None:
        return None


def _own_facts(cycle: int) -> Any:
    """The context in which the embedded engine trusts only this launcher's signed facts."""
    from relaunch.launcher import facts
    from relaunch.restart_agent.facts import verifying

    return verifying([facts.cycle_key(cycle)])


def _fact_key(cycle: int) -> str:
    """The cycle's fact key as handed to a service (hex), at the cycle's end only."""
    from relaunch.launcher import facts

    return facts.cycle_key(cycle).hex()


def _from_verdict(cycle: int, verdict: Verdict, source: str) -> VerdictInfo:
    """A verdict this process decided (embedded engine)."""
    return VerdictInfo(
        cycle=cycle,
        decision=verdict.decision,
        reason=verdict.basis,
        rule=str(verdict.rule),
        source=source,
        raw=verdict.to_dict(),
    )


def _read_verdict(result: Any) -> Verdict | None:
    """A service's verdict JSON as a `Verdict` (None: none, or not one)."""
    from relaunch.restart_agent.model import Verdict

    return Verdict.read(result)


def _from_verdict_dict(cycle: int, verdict: dict[str, Any], source: str) -> VerdictInfo:
    """A verdict in its JSON form (the LLM enrichment's result, embedded mode only), read
    once here; not a verdict (no STOP/RESTART decision): RESTART, the default bias."""
    from relaunch.restart_agent.model import Decision, Verdict

    v = Verdict.read(verdict)
    return VerdictInfo(
        cycle=cycle,
        decision=v.decision if v is not None else Decision.RESTART,
        reason=str((v.basis if v is not None else None) or verdict.get("reason") or ""),
        rule=str(v.rule) if v is not None else None,
        source=source,
        raw=verdict,
    )


class EmbeddedClient(AttributionClient):
    """The analyzer and the SQLite history inside the launcher process."""

    name = "embedded"

    def __init__(
        self,
        on_verdict: OnVerdict,
        on_warning: OnWarning,
        *,
        db_url: str,
        audit_dir: str | None = None,
        llm_config: Any | None = None,
        policy: Any | None = None,  # restart_agent.model.PolicyConfig (None: defaults)
    ) -> None:
        self.db_url = db_url
        self.audit_dir = audit_dir
        self._llm_config = llm_config
        self._policy = policy
        self._engine: AttributionEngine | None = None
        self._repo: Any | None = None
        super().__init__(on_verdict, on_warning)
        # open (and migrate) the database at once, while the first workers start up
        self._submit(self._open, gated=False, budget=OPEN_BUDGET_S)

    def _open(self) -> None:
        from relaunch.attribution.core.engine import AttributionEngine
        from relaunch.attribution.core.listeners import install_listeners
        from relaunch.storage import open_repository

        self._repo = open_repository(self.db_url)
        self._engine = AttributionEngine(self._repo, policy=self._policy, audit_dir=self.audit_dir)
        install_listeners(
            self._engine,
            audit=self.audit_dir is not None,
            llm_config=self._llm_config,
            on_llm_result=self._llm_result,
        )

    def _llm_result(self, event: VerdictEvent, result: dict[str, Any]) -> None:
        """An LLM answer that shortened a workload bug's budget turns RESTART into STOP."""
        from relaunch.restart_agent.model import Decision, Verdict  # embedded: agent loaded

        v = Verdict.read(result)
        if (
            v is not None
            and v.decision == Decision.STOP
            and v.llm.contributed
            and event.verdict.decision != Decision.STOP
        ):
            self.on_verdict(_from_verdict_dict(int(event.cycle), result, "embedded+llm"))

    def _ready(self) -> AttributionEngine:
        if self._engine is None:
            raise RuntimeError("embedded attribution engine is not available")
        return self._engine

    def _register(
        self, job_id: str, cycle: int, log_path: str, node: int | None, at: datetime
    ) -> None:
        if self._engine is not None:
            self._engine.register_cycle(job_id, cycle, log_path, node=node, started_at=at)

    def _end_cycle(
        self, job_id: str, cycle: int, outcome: str, reason: str | None, at: datetime
    ) -> None:
        self._ready().end_cycle(job_id, cycle, outcome, reason=reason, ended_at=at)

    def _end_job(self, job_id: str, state: str, exit_code: int, reason: str | None) -> None:
        self._ready().end_job(job_id, state, exit_code, reason=reason)

    def _next_cycle(self, job_id: str) -> int | None:
        return self._ready().next_cycle(job_id)

    def close(self) -> bool:
        done = super().close()
        if self._engine is not None and not self._abandoned:
            self._engine.close(timeout=10.0)  # let audit listeners finish
        return done

    def _analyze(self, job_id: str, cycle: int, log_path: str, node: int | None) -> VerdictInfo:
        with _own_facts(cycle):  # only this launcher's signed facts count (launcher.facts)
            verdict = self._ready().analyze_cycle(job_id, cycle, log_path)
        return _from_verdict(cycle, verdict, "embedded")

    def _record_health(self, job_id: str, cycle: int, record: dict[str, Any]) -> VerdictInfo | None:
        with _own_facts(cycle):
            verdict = self._ready().record_node_health(job_id, cycle, record)
        return None if verdict is None else _from_verdict(cycle, verdict, "embedded")


class EndpointRefused(RuntimeError):
    """The attribution service answered a request with an HTTP error (it is reachable)."""

    def __init__(self, request: str, status: int, body: str) -> None:
        hint = ""
        if status in (401, 403):
            hint = " (check --ft-attribution-token-file: the service's --token-file token)"
        super().__init__(f"{request} answered {status}{hint}: {body[:200]}")
        self.status = status


class HttpClient(AttributionClient):
    """`relaunch serve` over TCP (`http://host:port`) or a Unix socket (`unix:///path`)."""

    name = "http"

    def __init__(
        self,
        on_verdict: OnVerdict,
        on_warning: OnWarning,
        *,
        endpoint: str,
        token: str | None = None,
        request_timeout: float = 5.0,
        poll_interval: float = 0.25,
        verdict_timeout: float = 300.0,
    ) -> None:
        # the service's bearer token (`relaunch serve --token-file`), sent with every request
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if endpoint.startswith("unix://"):
            transport = httpx.HTTPTransport(uds=endpoint[len("unix://") :])
            self._http = httpx.Client(
                transport=transport,
                base_url="http://relaunch",
                timeout=request_timeout,
                headers=headers,
            )
        else:
            self._http = httpx.Client(
                base_url=endpoint.rstrip("/"), timeout=request_timeout, headers=headers
            )
        self.endpoint = endpoint
        self.poll_interval = poll_interval
        self.verdict_timeout = verdict_timeout
        self._warned_register: set[str] = set()
        self._lease: tuple[str, str] | None = None  # (job, node) renewed while running
        self._lease_stop = threading.Event()
        # multi-node cycles decided without some nodes' logs: (job, cycle) -> the nodes
        # missing then; a re-decision (a late node's log) is pushed to this launcher
        self._partial: dict[tuple[str, int], tuple[str, ...]] = {}
        super().__init__(on_verdict, on_warning)

    def _post(self, job_id: str, cycle: int, log_path: str, intent: str) -> None:
        body = {
            "log_path": log_path,
            "job_id": job_id,
            "cycle_id": cycle,
            "analysis_intent": intent,
        }
        if intent == "terminal":  # the cycle ended, its workers are gone: hand over its key
            body["fact_key"] = _fact_key(cycle)
        resp = self._http.post("/logs", json=body)
        if resp.status_code >= 400:
            raise EndpointRefused("POST /logs", resp.status_code, resp.text)

    def _multi(self, job_id: str, cycle: int) -> tuple[str, int] | None:
        """(node id, node count) of a multi-node cycle, None for a single node."""
        with self._cond:
            node, nodes = self._cycle_nodes.get((job_id, cycle), (None, None))
        if node is None or nodes is None:
            return None
        return f"node{node}", nodes

    def _cycle_url(self, job_id: str, cycle: int) -> str:
        from urllib.parse import quote

        return f"/v1/jobs/{quote(job_id, safe='')}/cycles/{cycle}"

    def _nodes_url(self, job_id: str, cycle: int, suffix: str = "") -> str:
        return f"{self._cycle_url(job_id, cycle)}/nodes{suffix}"

    def _register(
        self, job_id: str, cycle: int, log_path: str, node: int | None, at: datetime
    ) -> None:
        multi = self._multi(job_id, cycle)
        try:
            if multi is not None:  # one log per node, the cycle analysed over all of them
                # no fr_dir: this node uploads its dumps before its end (`_upload_dumps`), so
                # they reach the service without a log dir it shares with every node
                body = {
                    "log_path": log_path,
                    "nodes": multi[1],
                    "group_rank": node,
                    "host": socket.gethostname(),
                }
                resp = self._http.post(self._nodes_url(job_id, cycle, f"/{multi[0]}"), json=body)
                if resp.status_code >= 400:
                    raise EndpointRefused("POST node log", resp.status_code, resp.text)
                return
            self._post(job_id, cycle, log_path, "track_only")
        except EndpointRefused as exc:  # it answered: say what it said, not "unreachable"
            if "refused" not in self._warned_register:  # once per kind of trouble
                self._warned_register.add("refused")
                self.on_warning(f"attribution endpoint {self.endpoint} refused the cycle: {exc}")
        except Exception as exc:  # noqa: BLE001 - any other failure: the endpoint is unreachable
            if "unreachable" not in self._warned_register:
                self._warned_register.add("unreachable")
                self.on_warning(f"attribution endpoint {self.endpoint} unreachable: {exc}")

    def _analyze_nodes(self, job_id: str, cycle: int) -> VerdictInfo:
        """The one verdict of a multi-node cycle (the service analyses all nodes' logs)."""
        deadline = time.monotonic() + self.verdict_timeout
        while True:
            resp = self._http.get(self._nodes_url(job_id, cycle))
            if resp.status_code >= 400:
                raise EndpointRefused("GET cycle nodes", resp.status_code, resp.text)
            data = resp.json()
            if data.get("status") == "failed":
                raise RuntimeError(str(data.get("error") or "analysis failed"))
            verdict = data.get("verdict")
            if data.get("status") == "completed" and isinstance(verdict, dict):
                missing = _missing_nodes(verdict)
                if missing:
                    with self._cond:
                        self._partial[(job_id, cycle)] = missing
                return _nodes_verdict(cycle, verdict, data)
            if time.monotonic() > deadline:
                raise TimeoutError(f"no verdict after {self.verdict_timeout:.0f} s")
            time.sleep(self.poll_interval)

    def _analyze(self, job_id: str, cycle: int, log_path: str, node: int | None) -> VerdictInfo:
        if self._multi(job_id, cycle) is not None:
            return self._analyze_nodes(job_id, cycle)
        # first the dumps (stored, not yet analysed): the cycle's analysis joins them, and a
        # service on another host reads no dump folder of this one
        self._upload_dumps(job_id, cycle, f"{self._cycle_url(job_id, cycle)}/fr?analyse=false")
        self._post(job_id, cycle, log_path, "terminal")
        deadline = time.monotonic() + self.verdict_timeout
        while True:
            resp = self._http.get("/logs", params={"log_path": log_path, "wait": "false"})
            if resp.status_code >= 400:
                raise EndpointRefused("GET /logs", resp.status_code, resp.text)
            data = resp.json()
            if data.get("status") == "completed":
                rec = data.get("recommendation") or {}
                v = _read_verdict(data.get("result"))  # the service's JSON, read once
                said = rec.get("action") or (v.decision if v is not None else None)
                decision = str(said or "RESTART").upper()
                if decision not in ("STOP", "RESTART"):
                    decision = "RESTART"  # UNKNOWN: the default bias
                return VerdictInfo(
                    cycle=cycle,
                    decision=decision,
                    reason=str(rec.get("reason") or (v.basis if v is not None else "") or ""),
                    rule=str(v.rule) if v is not None else None,
                    source=f"http:{rec.get('source') or 'service'}",
                    raw=data,
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"no verdict after {self.verdict_timeout:.0f} s")
            time.sleep(self.poll_interval)

    def _record_health(self, job_id: str, cycle: int, record: dict[str, Any]) -> VerdictInfo | None:
        resp = self._http.post(
            f"{self._cycle_url(job_id, cycle)}/node-health",
            json=record,
            timeout=max(self._http.timeout.read or 5.0, 60.0),  # the service re-decides
        )
        if resp.status_code >= 400:
            raise EndpointRefused("POST node-health", resp.status_code, resp.text)
        verdict = resp.json().get("verdict")
        return _from_verdict_dict(cycle, verdict, "http") if isinstance(verdict, dict) else None

    def _analysis_budget(self, log_path: str) -> float:
        return self.verdict_timeout + 2 * (self._http.timeout.read or 5.0)

    def _end_cycle(
        self, job_id: str, cycle: int, outcome: str, reason: str | None, at: datetime
    ) -> None:
        body = {"outcome": outcome, "reason": reason, "ended_at": at.isoformat()}
        resp = self._http.post(f"{self._cycle_url(job_id, cycle)}/end", json=body)
        if resp.status_code >= 400:
            raise EndpointRefused("POST cycle end", resp.status_code, resp.text)
        multi = self._multi(job_id, cycle)
        if multi is not None:  # this node's log is complete: the service may analyse
            # first: the analysis joins them
            self._upload_dumps(job_id, cycle, self._nodes_url(job_id, cycle, f"/{multi[0]}/fr"))
            resp = self._http.post(
                self._nodes_url(job_id, cycle, f"/{multi[0]}/end"),
                json={
                    "outcome": outcome,
                    "analyse": self._analyse.get((job_id, cycle), True),
                    "fact_key": _fact_key(cycle),  # its workers are gone (module docstring)
                },
                timeout=max(self._http.timeout.read or 5.0, 60.0),  # it hashes the log
            )
            if resp.status_code >= 400:
                raise EndpointRefused("POST node end", resp.status_code, resp.text)

    def _upload_dumps(self, job_id: str, cycle: int, url: str) -> None:
        """Send this node's Flight Recorder dumps of the cycle (`rank_<R>` in its dump
        folder, regular files only, each at most MAX_DUMP_UPLOAD bytes) to the service. A
        refused or failed upload is a warning: the logs are analysed without them."""
        with self._cond:
            fr_dir = self._fr_dirs.get((job_id, cycle))
        if fr_dir is None:
            return
        paths = []
        try:
            for p in sorted(Path(fr_dir).iterdir()):
                st = p.lstat()
                regular = stat.S_ISREG(st.st_mode)
                if p.name.startswith("rank_") and regular and st.st_size <= MAX_DUMP_UPLOAD:
                    paths.append(p)
        except OSError:
            return
        if not paths:
            return
        try:
            with contextlib.ExitStack() as stack:
                files = [
                    (
                        "files",
                        (p.name, stack.enter_context(open(p, "rb")), "application/octet-stream"),
                    )
                    for p in paths
                ]
                resp = self._http.post(
                    url,
                    files=files,
                    # multipart is CORS-safelisted: say it is not a browser's form post
                    headers={"X-Relaunch-Client": "relaunch-launcher"},
                    timeout=max(self._http.timeout.read or 5.0, 60.0),
                )
        except (OSError, httpx.HTTPError) as exc:  # the node's end is reported all the same
            self.on_warning(
                f"flight recorder dumps of cycle {cycle} not sent to {self.endpoint}: {exc}"
            )
            return
        if resp.status_code >= 400:
            self.on_warning(
                f"attribution endpoint {self.endpoint} refused the Flight Recorder dumps of "
                f"cycle {cycle}: {resp.status_code} {resp.text[:200]}"
            )

    def _end_job(self, job_id: str, state: str, exit_code: int, reason: str | None) -> None:
        from urllib.parse import quote

        body = {"state": state, "exit_code": exit_code, "reason": reason}
        resp = self._http.post(f"/v1/jobs/{quote(job_id, safe='')}/end", json=body)
        if resp.status_code >= 400:
            raise EndpointRefused("POST job end", resp.status_code, resp.text)

    def _next_cycle(self, job_id: str) -> int | None:
        from urllib.parse import quote

        resp = self._http.get(f"/v1/jobs/{quote(job_id, safe='')}")
        if resp.status_code == 404:
            return None
        if resp.status_code >= 400:
            raise EndpointRefused("GET job", resp.status_code, resp.text)
        last = resp.json().get("last_cycle")
        return last + 1 if isinstance(last, int) and not isinstance(last, bool) else None

    def start_lease(self, job_id: str, node: int | None) -> None:
        """Renew `node`'s lease on the job from a thread of its own (a long analysis in the
        queue must not let it lapse) until `close`, which releases it."""
        if self._lease is not None:
            return
        self._lease = (job_id, f"node{node or 0}")
        threading.Thread(target=self._renew_loop, name="relaunch-lease", daemon=True).start()

    def _lease_call(self, release: bool = False) -> float:
        from urllib.parse import quote

        assert self._lease is not None
        job_id, node = self._lease
        body: dict[str, Any] = {"node": node, "host": socket.gethostname(), "release": release}
        resp = self._http.post(f"/v1/jobs/{quote(job_id, safe='')}/lease", json=body)
        if resp.status_code >= 400:
            raise EndpointRefused("POST lease", resp.status_code, resp.text)
        every = resp.json().get("renew_every_s")
        return float(every) if isinstance(every, (int, float)) and every > 0 else LEASE_RENEW_S

    def _renew_loop(self) -> None:
        every = LEASE_RENEW_S
        while not self._lease_stop.is_set():
            try:
                every = min(LEASE_RENEW_S, self._lease_call())
            except Exception:  # noqa: BLE001 - the service is down: try again; it marks nothing meanwhile
                every = LEASE_RENEW_S
            self.check_redecided()
            self._lease_stop.wait(every)

    def check_redecided(self) -> list[VerdictInfo]:
        """Ask again about the multi-node cycles decided without some nodes' logs (at each
        lease renewal while the job runs); a cycle the service decided again with more
        nodes' logs is pushed to `on_verdict` with `redecided=True` (the agent acts on it
        like a re-decision after a node-health report). Returns what was pushed."""
        with self._cond:
            partial = dict(self._partial)
        pushed: list[VerdictInfo] = []
        for (job_id, cycle), missing in partial.items():
            try:
                resp = self._http.get(self._nodes_url(job_id, cycle))
                data = resp.json() if resp.status_code < 400 else {}
            except Exception:  # noqa: BLE001 - the service is away: ask at the next renewal
                continue
            verdict = data.get("verdict") if data.get("status") == "completed" else None
            if not isinstance(verdict, dict):
                continue
            now = _missing_nodes(verdict)
            if now == missing:
                continue  # not decided again yet
            with self._cond:
                if now:
                    self._partial[(job_id, cycle)] = now
                else:
                    self._partial.pop((job_id, cycle), None)
            info = dataclasses.replace(_nodes_verdict(cycle, verdict, data), redecided=True)
            pushed.append(info)
            self.on_verdict(info)
        return pushed

    def close(self) -> bool:
        done = super().close()
        self._lease_stop.set()
        if self._lease is not None and not self._abandoned:
            with contextlib.suppress(Exception):  # best effort: the job's end is recorded
                self._lease_call(release=True)
        self._http.close()
        return done


def _missing_nodes(verdict: dict[str, Any]) -> tuple[str, ...]:
    """The nodes a multi-node verdict was decided without (`cycle_nodes.missing`)."""
    nodes = verdict.get("cycle_nodes")
    missing = nodes.get("missing") if isinstance(nodes, dict) else None
    return tuple(str(m) for m in missing) if isinstance(missing, list) else ()


def _nodes_verdict(cycle: int, verdict: dict[str, Any], data: dict[str, Any]) -> VerdictInfo:
    info = _from_verdict_dict(cycle, verdict, "http")
    decision = "STOP" if str(info.decision).upper() == "STOP" else "RESTART"
    return dataclasses.replace(info, decision=decision, raw=data)


def make_client(
    endpoint: str,
    on_verdict: OnVerdict,
    on_warning: OnWarning,
    *,
    db_url: str,
    audit_dir: str | None = None,
    llm_config: Any | None = None,
    policy: Any | None = None,
    token: str | None = None,
) -> AttributionClient:
    """Build the client for `--ft-attribution-endpoint` (validated by the config).
    `policy` (a PolicyConfig) is the embedded engine's; a service uses its own. `token`:
    the service's bearer token (http/unix endpoints)."""
    if endpoint == "off":
        return OffClient(on_verdict, on_warning)
    if endpoint == "embedded":
        return EmbeddedClient(
            on_verdict,
            on_warning,
            db_url=db_url,
            audit_dir=audit_dir,
            llm_config=llm_config,
            policy=policy,
        )
    if endpoint.startswith(("http://", "https://", "unix://")):
        return HttpClient(on_verdict, on_warning, endpoint=endpoint, token=token)
    raise ValueError(f"unknown attribution endpoint {endpoint!r}")
