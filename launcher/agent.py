"""`relaunch run`'s supervisor: torch.distributed.elastic's LocalElasticAgent, extended.

`RelaunchAgent` keeps elastic's rendezvous, worker start/stop and restart loop and adds:
one cycle log per node per cycle (`launcher.cycle_log`), heartbeat hang detection
(`launcher.heartbeat`), the attribution client (register at cycle start, request the
analysis at cycle end without waiting, apply a STOP as soon as it arrives), the node
health preflight before each rendezvous and the checks during the run, the exclusion file
(`launcher.health.runtime`) and `--numa-binding` (`launcher.numa`). It records the truth about the job: the end of
every cycle and the job's final state with its exit code (through the attribution
client, flushed before exit), machine-readable facts in each cycle log
(`launcher.facts`), cycle numbers that continue a re-run job id and a restart budget that
is job-wide across nodes (`launcher.jobwide`), the progress guard that ends a job after N
restarts without progress (`launcher.progress_guard`) and calculated timeouts
(`launcher.timeouts_auto`). `launch(settings)` builds the rendezvous
handler, the agent and its helpers, runs the job and returns the process exit code;
SIGINT/SIGTERM at any moment end it with 128+N, workers stopped and history flushed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from torch.distributed.elastic.agent.server.api import (
    RunResult,
    WorkerGroup,
    WorkerSpec,
    WorkerState,
)
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.rendezvous import (
    RendezvousClosedError,
    RendezvousError,
    RendezvousParameters,
)
from torch.distributed.elastic.rendezvous import dynamic_rendezvous as _dyn_rdzv
from torch.distributed.elastic.rendezvous import registry as rdzv_registry
from torch.distributed.run import _parse_rendezvous_config

from relaunch.attribution.core.terminal import safe_text
from relaunch.launcher import facts, fr_dumps, job_lock, jobwide, progress_guard
from relaunch.launcher.attribution_client import AttributionClient, VerdictInfo, make_client
from relaunch.launcher.config import RunSettings
from relaunch.launcher.console import Console
from relaunch.launcher.cycle_log import CycleLog, FileSink, LineSink, RankLogsSpecs, cycle_log_name
from relaunch.launcher.exit_times import ExitTimes
from relaunch.launcher.heartbeat import ENV_CYCLE, ENV_SOCKET, HeartbeatServer, RankMonitor
from relaunch.launcher.outcome import ExitCode, JobOutcome, signal_code
from relaunch.launcher.rdzv.node import uses_barrier
from relaunch.launcher.rdzv.worker_store import DISABLE_ENV
from relaunch.launcher.result import LaunchResult
from relaunch.launcher.signal_state import HANDLED_SIGNALS as HANDLED_SIGNALS  # its old home
from relaunch.launcher.signal_state import SignalState
from relaunch.launcher.straggler.scores import StragglerReports
from relaunch.launcher.timeouts_auto import AutoTimeouts, effective
from relaunch.launcher.validate import attribution_token
from relaunch.restart_agent.model import Decision, JobState

# the exit codes under their former names (launcher.outcome.ExitCode)
EXIT_OK = ExitCode.OK
EXIT_FAILED = ExitCode.FAILED
EXIT_STOPPED = ExitCode.STOPPED
EXIT_NODE_UNHEALTHY = ExitCode.NODE_UNHEALTHY
EXIT_RENDEZVOUS = ExitCode.RENDEZVOUS
EXIT_NO_PROGRESS = ExitCode.NO_PROGRESS
NO_PROGRESS_CLOSE = "no_progress"  # the rendezvous's closed value for a progress-guard end
# relaunch.checkpoint.ENV_RESUME, spelled again: that module imports torch's DCP, which the
# launcher does not need (tests/checkpoint/test_checkpoint.py checks the two agree)
ENV_RESUME = "RELAUNCH_RESUME_CHECKPOINT"

EMBEDDED_MULTINODE = (
    "--ft-attribution-endpoint embedded analyses one node's log only; a job that may run on "
    "several nodes (--nnodes {nnodes}) needs one verdict over all of them: run "
    "`relaunch serve --allowed-root LOG_DIR` and give every node "
    "--ft-attribution-endpoint http://HOST:8570 (or use off); no worker was started"
)
RELEASE_AFTER_S = 2.0  # analyses wait at most this long after a (re)start for workers to be up
STORED_HISTORY_WAIT_S = 60.0  # longest the first cycle waits to learn the stored history


class _StopJob(Exception):
    """Raised inside the agent loop when a STOP verdict ends the job between cycles."""


class _NodeUnhealthy(Exception):
    """The preflight found this node unhealthy."""


class _NoProgress(Exception):
    """The progress guard ended the job after a rendezvous (every node decides the same)."""


@dataclass
class _CycleState:
    cycle: int
    node: int | None
    log: CycleLog
    log_path: str
    spool: str
    started: float
    failure: str | None = None  # why the cycle failed (None: still running or succeeded)
    stopped_by_verdict: bool = False
    ended: bool = False
    first_failed: set[int] | None = None  # local ranks that failed before elastic closed the rest
    first_failed_at: float | None = None  # monotonic time the first failure was seen
    ranks: tuple[int, ...] = ()  # global ranks of this node
    iterations: dict[int, int] | None = None  # last iteration reported per global rank
    exits: ExitTimes | None = None  # when each worker process exited (pidfds)
    fr_dir: Path | None = None  # where this cycle's Flight Recorder dumps go
    fr_done: bool = False  # this node's workers were asked for their dumps


@contextlib.contextmanager
def _no_join_skew() -> Iterator[None]:
    """Skip the c10d rendezvous's random 0-300 ms delay before a join (single node only).

    Elastic sleeps a random fraction of 0.3 s before joining a round to spread the join
    attempts of many nodes over time. With one node there is nothing to spread, and the
    sleep is paid at every restart. Its 1 s polling delay (a float, not a range) is kept.
    """
    original = _dyn_rdzv._delay

    def delay(seconds: float | tuple[float, float]) -> None:
        if isinstance(seconds, tuple):
            return
        original(seconds)

    _dyn_rdzv._delay = delay
    try:
        yield
    finally:
        _dyn_rdzv._delay = original


def _describe_exit(rank: int, exitcode: int) -> str:
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"rank {rank} killed by signal {name}"
    return f"rank {rank} exited with code {exitcode}"


SIGNALS = SignalState()  # the signals this process received (launcher.signal_state)


def signal_behind(exc: BaseException) -> SignalException | None:
    """The `SignalException` that `exc` is, or that it masks.

    A signal raises where the interpreter happens to be. Inside torch elastic's metrics
    wrapper (`@prof`) that can be `start = time.time()`, before `start` is bound; the
    wrapper's `finally` then fails with UnboundLocalError, which replaces the signal, the
    signal surviving only as its `__context__`. Such an exception is still the signal.
    """
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, SignalException):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def install_signal_handlers() -> dict[signal.Signals, Any]:
    """From the launcher's first moment (before elastic installs the same handlers when
    workers start), SIGINT/SIGTERM/SIGHUP/SIGQUIT end the job through `run_job`'s path:
    workers stopped, history flushed, exit 128+N. Also when the shell started the
    launcher with SIGINT ignored (a background job). Returns the handlers replaced."""
    return SIGNALS.install()


class RelaunchAgent(LocalElasticAgent):
    """LocalElasticAgent with per-cycle logs, heartbeats and verdicts."""

    def __init__(
        self,
        spec: WorkerSpec,
        settings: RunSettings,
        logs_specs: RankLogsSpecs,
        attribution_factory: Any,
        out: TextIO = sys.stderr,
        sink_factory: Any = None,
    ) -> None:
        super().__init__(
            spec=spec,
            logs_specs=logs_specs,
            start_method=settings.start_method,
            exit_barrier_timeout=300,
            shutdown_timeout=max(1, int(round(settings.workers_stop_timeout))),
        )
        self.settings = settings
        self._rank_logs = logs_specs
        self._out = out
        self._out_lock = threading.Lock()
        self._sink_factory = sink_factory or (lambda path, cycle, node: FileSink(path))
        self._console = Console(settings.console_spec(), settings.nproc_per_node)
        self._stragglers = StragglerReports(  # docs/straggler.md
            settings.ft_straggler_report_interval, settings.ft_straggler_threshold, self._event
        )
        self._heartbeats = HeartbeatServer(
            on_progress=self._on_progress, on_straggler=self._stragglers.on_message
        )
        self._fr_user = fr_dumps.user_environment()  # the user's FR settings win
        self._funnel_auto: Any = None  # --ft-log-funnel auto on several nodes
        self._funnel_said = False
        if settings.ft_log_funnel == "auto" and settings.max_nodes > 1:
            from relaunch.launcher.funnel.auto import AutoFunnel

            self._funnel_auto = AutoFunnel(
                settings.job_dir, settings.rdzv_endpoint, settings.local_addr or None
            )
        self._cycle_no = -1
        self._resume: tuple[int, str] | None = None  # (step, path) of the newest checkpoint
        self._last_node: int | None = None  # this launcher's node number in the last cycle
        self._state: _CycleState | None = None
        self._last_log_path: str | None = None
        self._late_lines: list[str] = []
        self._state_lock = threading.RLock()
        self.verdicts: dict[int, VerdictInfo] = {}
        self.stop_verdict: VerdictInfo | None = None
        self._stop_applied = False  # the monitor acted on stop_verdict: it can no longer change
        self.health_reason: str | None = None
        self._monitor: RankMonitor | None = None
        self._gate_open = False
        self._next_cycle_no: int | None = None  # agreed at each rendezvous (job-wide)
        self._rdzv_rounds = 0
        self._cycles_started = 0  # cycles run by this launcher (a continued job started later)
        self._signal_seen = False  # run_job has handled a signal: no re-raise
        self.terminal: JobState | None = None  # job-wide outcome that closes the rendezvous
        self._ended_elsewhere = False  # its monitor saw the rendezvous closed by another node
        self._no_progress = False  # the progress guard ended the job (closes it "no_progress")
        self.recorded_stops: list[VerdictInfo] = []  # STOP verdicts only logged (action log)
        self.final: tuple[JobState, int, str] | None = None  # (state, exit code, reason) recorded
        self.attribution: AttributionClient = attribution_factory(self._on_verdict, self._warn)
        self._progress = progress_guard.ProgressGuard(  # docs/launcher.md, progress guard
            settings.ft_max_no_progress_restarts, settings.ft_min_progress_iterations
        )
        self.no_progress_reason: str | None = None
        self.unhealthy_reason: str | None = None  # the failed check that made this node leave
        self._auto_timeouts = (
            AutoTimeouts(settings.job_dir, settings.ft_safety_factor, self.say)
            if settings.ft_calculate_timeouts
            else None
        )
        self._stored_next = self.attribution.stored_next_cycle(settings.job_id)
        from relaunch.launcher.health.runtime import (
            RuntimeHealth,  # health during the run, exclusion file
        )

        self._health = RuntimeHealth(settings, self.say, self._event)

    # -- printing ---------------------------------------------------------------
    def say(self, text: str) -> None:
        """One launcher line on the console; text from logs (verdict reasons, evidence) has
        its terminal control characters escaped."""
        with self._out_lock:
            print(f"relaunch: {safe_text(text)}", file=self._out, flush=True)

    def _warn(self, text: str) -> None:
        self.say(f"warning: {text}")
        self._event(f"warning: {text}")

    def _event(self, text: str) -> None:
        """A `[relaunch]` line in the current cycle log (or the last one, appended)."""
        with self._state_lock:
            st = self._state
            if st is not None and not st.ended:
                st.log.event(text)
                return
            self._late_lines.append(text)

    def _flush_late_lines(self) -> None:
        with self._state_lock:
            lines, self._late_lines = self._late_lines, []
            path = self._last_log_path
        if lines and path:
            with open(path, "a", encoding="utf-8") as fh:
                for line in lines:
                    fh.write(f"[relaunch] {line}\n")

    # -- callbacks from other threads ---------------------------------------------
    def _on_progress(self, cycle: int, rank: int, msg: dict[str, Any]) -> None:
        with self._state_lock:
            st = self._state
            it = msg.get("i")
            if (
                st is not None
                and st.cycle == cycle
                and st.iterations is not None
                and isinstance(it, int)
                and not isinstance(it, bool)
            ):
                st.iterations[rank] = it
        if isinstance(msg.get("cs"), int):  # a completed checkpoint (relaunch.checkpoint)
            self._on_checkpoint(cycle, rank, msg)
            return
        parts = [f"progress rank={rank}"]
        if "i" in msg:
            parts.append(f"iteration={msg['i']}")
        if msg.get("ckpt"):
            parts.append(f"checkpoint={msg['ckpt']}")
        self._event(" ".join(parts))

    def _on_checkpoint(self, cycle: int, rank: int, msg: dict[str, Any]) -> None:
        """A `checkpoint` fact; the newest step is what the next cycle resumes from."""
        try:
            line = facts.checkpoint(
                cycle, rank, msg["cs"], msg["ckpt"], msg.get("ct", ""), msg.get("cb", 0),
                msg.get("cd", 0.0),
            )  # fmt: skip
        except (KeyError, TypeError, ValueError):
            return
        self._event(line)
        # the restart agent's `relaunch_checkpoint` progress dialect (restart_agent/progress.yaml):
        # the verdict, and so the history, records the cycle's last checkpoint
        path = str(msg["ckpt"]).replace(" ", "%20")
        self._event(
            f"checkpoint saved iteration={msg['cs']} path={path} rank={rank} tier={msg.get('ct')}"
        )
        with self._state_lock:
            st = self._state
            if st is not None and st.cycle == cycle and st.iterations is not None:
                # a complete checkpoint of step N: the rank reached iteration N (progress)
                st.iterations[rank] = max(st.iterations.get(rank, msg["cs"]), msg["cs"])
            if self._resume is None or msg["cs"] >= self._resume[0]:
                self._resume = (int(msg["cs"]), str(msg["ckpt"]))

    def _on_verdict(self, v: VerdictInfo) -> None:
        self.verdicts[v.cycle] = v
        rule = f" [{v.rule}]" if v.rule else ""
        line = f"verdict cycle={v.cycle} decision={v.decision}{rule} source={v.source}: {v.reason}"
        self.say(line)
        self._event(line)
        if v.decision == Decision.STOP and self.settings.ft_attribution_stop_action == "log":
            self.recorded_stops.append(v)
            self.say(
                f"*** STOP verdict for cycle {v.cycle}{rule}: {v.reason} -- recorded only "
                "(--ft-attribution-stop-action log); the job goes on. "
                "--ft-attribution-stop-action no-restart acts on it ***"
            )
        if (
            v.decision == Decision.STOP
            and self.settings.ft_attribution_stop_action == "no-restart"
            and self.stop_verdict is None
        ):
            self.stop_verdict = v  # applied by the monitor loop at its next tick
        elif v.decision == Decision.RESTART and v.redecided:
            # the cycle was decided again (a node's failed health check arrived after the
            # first verdict): the newer verdict replaces a STOP not yet acted on
            with self._state_lock:
                stop = self.stop_verdict
                if stop is not None and stop.cycle == v.cycle and not self._stop_applied:
                    self.stop_verdict = None
                    self.say(f"STOP for cycle {v.cycle} withdrawn: decided again as RESTART")

    # -- cycles -------------------------------------------------------------------
    def _node(self, worker_group: WorkerGroup) -> int | None:
        return worker_group.group_rank if self.settings.max_nodes > 1 else None

    def _begin_cycle(self, worker_group: WorkerGroup) -> _CycleState:
        self._cycle_no = (
            self._next_cycle_no if self._next_cycle_no is not None else self._cycle_no + 1
        )
        self._next_cycle_no = None
        self._cycles_started += 1
        cycle, node = self._cycle_no, self._node(worker_group)
        self._last_node = node
        job_dir = self.settings.job_dir
        log_path = str((job_dir / cycle_log_name(cycle, node)).resolve())
        sink: LineSink = self._cycle_sink(worker_group, log_path, cycle, node)
        spool = str(job_dir / ".spool" / Path(cycle_log_name(cycle, node)).stem)
        self._rank_logs.set_spool_dir(spool)
        log = CycleLog(
            sink,
            keep_spool=self.settings.ft_keep_rank_logs,
            fallback_path=log_path,
            on_sink_error=lambda msg: self.say(f"warning: cycle {cycle} log sink failed: {msg}"),
            console=self._console,
        )
        self.say(f"cycle {cycle} log: {log_path}")
        ranks = [w.global_rank for w in worker_group.workers]
        st = _CycleState(
            cycle, node, log, log_path, spool, time.monotonic(), ranks=tuple(ranks), iterations={}
        )
        with self._state_lock:
            self._state = st
            self._last_log_path = log_path
            late, self._late_lines = self._late_lines, []
        world_size = worker_group.workers[0].world_size
        log.event(
            f"cycle {cycle} start: job={self.settings.job_id} node={node if node is not None else 0} "
            f"ranks={ranks[0]}..{ranks[-1]} world_size={world_size} "
            f"restarts_left={self._remaining_restarts}/{self.settings.max_restarts} "
            f"host={socket.gethostname()} launcher_pid={os.getpid()}"  # who ran it (spares)
        )
        log.event(
            facts.cycle_start(cycle, self.settings.job_id, node, ranks, world_size, time.time())
        )
        for text in late:  # verdicts that arrived between two cycles
            log.event(text)
        nodes = worker_group.group_world_size if node is not None else None
        self.attribution.register(
            self.settings.job_id,
            cycle,
            log_path,
            node,
            nodes,
            fr_dir=str(fr_dumps.cycle_dir(job_dir, cycle).resolve()),
        )
        self.attribution.start_lease(self.settings.job_id, node)  # renewed while it runs
        return st

    def _cycle_sink(
        self, worker_group: WorkerGroup, log_path: str, cycle: int, node: int | None
    ) -> LineSink:
        """The cycle log's sink; with `--ft-log-funnel auto` on several nodes, a stream to
        the writer group rank 0 runs (launcher.funnel.auto), else the configured one."""
        auto = self._funnel_auto
        if auto is None or node is None:
            return self._sink_factory(log_path, cycle, node)
        try:
            address = auto.address(worker_group.store, node)
        except Exception as exc:  # noqa: BLE001 - no writer: this node's log stays local
            self._warn(f"log funnel (auto) not available: {type(exc).__name__}: {exc}")
            return FileSink(log_path)
        if node == 0:
            if not self._funnel_said:
                self._funnel_said = True
                self.say(f"log funnel writer (auto) at {address}, root {self.settings.job_dir}")
            return FileSink(log_path)  # the writer's own node writes its file directly
        return funnel_sink_factory(address)(log_path, cycle, node)

    def close_funnel(self) -> None:
        """Stop the auto log funnel writer (after the other nodes saw the job's end)."""
        if self._funnel_auto is not None:
            self._funnel_auto.close()

    def _end_cycle(self, outcome: JobState) -> None:
        """Close the cycle log with its facts; record the end; a failed cycle's analysis is
        requested (never awaited). `outcome`: succeeded | failed | stopped | interrupted."""
        self._health.stop_cycle()
        self._heartbeats.sync()  # progress reports already sent belong in this log
        scores = self._stragglers.end_cycle()  # outside the lock: may wait for the store
        with self._state_lock:
            st = self._state
            if st is None or st.ended:
                return
            if scores is not None:
                st.log.event(scores)
            duration = time.monotonic() - st.started
            monitor = self._monitor
            client = bool(st.iterations) or bool(monitor is not None and monitor.ranks_seen())
            st.log.event(facts.iterations(st.cycle, dict(st.iterations or {}), st.ranks, client))
            self._progress.cycle_ended(st.iterations)
            if self._auto_timeouts is not None:
                self._auto_timeouts.end_cycle(st.cycle)
            st.log.event(facts.cycle_end(st.cycle, outcome, duration))
            st.log.event(f"cycle {st.cycle} end: {outcome} after {duration:.1f} s")
            st.ended = True
        st.log.close()
        if st.exits is not None:
            st.exits.close()
        job = self.settings.job_id
        reason = st.failure if outcome != JobState.SUCCEEDED else "all ranks exited with code 0"
        # a multi-node cycle has one verdict, decided over every node's log: a node whose
        # workers were stopped because another node failed asks for it too
        failed = outcome == JobState.FAILED or (
            st.node is not None and outcome == JobState.STOPPED and self.attribution.name == "http"
        )
        analyse = st.failure is not None and not st.stopped_by_verdict and failed
        # the analysis reads the end too: recorded first, so it is never left `registered`
        self.attribution.end_cycle(job, st.cycle, outcome, reason, analyse=analyse)
        if analyse:
            self.attribution.request_analysis(job, st.cycle, st.log_path, st.node)

    # -- elastic hooks ------------------------------------------------------------
    def _check_signal(self) -> None:
        """Raise again a signal whose SignalException was lost on its way up."""
        sig = SIGNALS.first()
        if sig is not None and not self._signal_seen:
            raise SignalException(f"process {os.getpid()} got signal {int(sig)}", sig)

    def _rendezvous(self, worker_group: WorkerGroup) -> None:
        self._check_signal()
        self._preflight()
        if self.settings.max_nodes > 1:
            super()._rendezvous(worker_group)
        else:
            with _no_join_skew():
                super()._rendezvous(worker_group)
        self._rdzv_rounds += 1
        self._check_signal()
        self._agree(worker_group)

    def _first_cycle(self) -> int:
        """Where this job id's cycles continue: after the stored history and the cycle logs
        already in the log folder (0 for a new job)."""
        from_logs = jobwide.next_cycle_in(self.settings.job_dir)
        try:
            stored = self._stored_next.result(timeout=STORED_HISTORY_WAIT_S)
        except FutureTimeout:
            self._warn(
                f"the stored history did not answer within {STORED_HISTORY_WAIT_S:g} s; "
                "numbering cycles from the log folder"
            )
            stored = None
        first = max(from_logs, stored or 0)
        if first:
            self.say(
                f"job {self.settings.job_id} continues: {first} earlier cycle(s) in its "
                f"history or log folder; this run starts at cycle {first}"
            )
        return first

    def _agree(self, worker_group: WorkerGroup) -> None:
        """Adopt the job-wide cycle number and restart budget (max over the nodes)."""
        local = self._cycle_no + 1 if self._cycle_no >= 0 else self._first_cycle()
        used = self.settings.max_restarts - self._remaining_restarts
        mine = jobwide.Proposal(local, used)
        tag = str(self._rdzv_rounds) if self.settings.rdzv_backend == "static" else ""
        rank, world = worker_group.group_rank, worker_group.group_world_size
        assert rank is not None and world is not None, "the rendezvous sets them first"
        try:
            agreed = jobwide.agree(
                worker_group.store,
                rank,
                world,
                mine,
                tag=tag,
            )
        except SignalException:
            raise
        except Exception as exc:  # noqa: BLE001 - a node gone between the rendezvous and the exchange
            self._warn(f"cycle number and budget not agreed with the other nodes: {exc}")
            agreed = mine
        self._next_cycle_no = agreed.next_cycle
        self._remaining_restarts = max(0, self.settings.max_restarts - agreed.restarts_used)
        self._judge_progress(worker_group, tag)

    def _judge_progress(self, worker_group: WorkerGroup, tag: str) -> None:
        """After a restart's rendezvous: the progress guard's job-wide decision."""
        rank, world = worker_group.group_rank, worker_group.group_world_size
        assert rank is not None and world is not None, "the rendezvous sets them first"
        d = self._progress.judge(
            worker_group.store,
            rank,
            world,
            tag=tag,
            warn=self._warn,
        )
        if not d.evaluated:
            return
        judged = max(0, (self._next_cycle_no or 0) - 1)
        for line in progress_guard.lines(d, judged):
            self._event(line)
        if not d.progressed:
            self.say(progress_guard.describe(d, judged))
        if d.end:
            self.no_progress_reason = progress_guard.end_reason(d)
            raise _NoProgress(self.no_progress_reason)

    def _preflight(self) -> None:
        excluded = self._health.excluded()  # --ft-exclusion-file: listed nodes do not join
        if excluded is not None:
            self._leave_unhealthy(excluded)
        s = self.settings
        endpoint = s.ft_node_health_check_endpoint or None
        if s.ft_gpu_health == "off" and endpoint is None:
            return
        from relaunch.launcher.health import preflight

        report = preflight(
            gpu=s.ft_gpu_health != "off",
            endpoint=endpoint,
            endpoint_args=self._health.groups,
            node=self._health.node_id,
        )
        if not report.healthy:
            self._leave_unhealthy(report)

    def _leave_unhealthy(self, report: Any) -> None:
        """Record the failed check (verdict + JSON copy + exclusion file) and leave."""
        self.health_reason = report.reason
        self._record_exclusion(report)
        self._health.publish(report)
        self._leave_round()
        raise _NodeUnhealthy(report.reason)

    def _leave_round(self) -> None:
        """Leave the rendezvous round this node was in, now that its health result is
        known: the other nodes' next round then starts on that result, not when this
        node's keep-alive heartbeats expire (15 s by default, and while the check runs
        they keep the node in the round). Best effort on elastic's dynamic rendezvous;
        other backends keep their own rules."""
        handler = self._worker_group.spec.rdzv_handler
        if hasattr(handler, "leave_round"):  # the barrier rendezvous (launcher.rdzv.barrier)
            handler.leave_round()
            return
        if self._cycle_no < 0:
            return  # never joined a round
        try:
            from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
                DynamicRendezvousHandler,
                _RendezvousExitOp,
            )

            if not isinstance(handler, DynamicRendezvousHandler):
                raise AttributeError(f"{type(handler).__name__} has no round to leave")

            handler._stop_heartbeats()
            deadline = handler._get_deadline(handler._settings.timeout.close)
            handler._op_executor.run(_RendezvousExitOp(), deadline)
        except (AttributeError, ImportError, RuntimeError, TimeoutError, RendezvousError) as exc:
            self.say(f"note: could not leave the rendezvous round early ({exc})")

    def _record_exclusion(self, report: Any) -> None:
        """The verdict of the cycle that just ended records that this node leaves the job
        (sent with that cycle's analysis); a JSON copy goes next to the cycle logs."""
        from relaunch.launcher.health import exclusion_record, write_record

        cycle, record = exclusion_record(
            report, last_cycle=self._cycle_no, node_index=self._last_node
        )
        if self._cycle_no >= 0:
            self._event(
                facts.node_health(
                    self._cycle_no, str(record.get("node")), False, str(report.reason)
                )
            )
        try:
            path = write_record(self.settings.job_dir, record)
            self.say(f"node health report written to {path}")
        except (OSError, TypeError, ValueError) as exc:
            self.say(f"warning: node health report not written: {exc}")
        if cycle is not None:  # before its first cycle a node has no verdict to join
            self.attribution.report_node_health(self.settings.job_id, cycle, record)

    def _start_workers(self, worker_group: WorkerGroup) -> dict[int, Any]:
        self._check_signal()
        with self._state_lock:
            stopping = self.stop_verdict is not None
            self._stop_applied = self._stop_applied or stopping
        if stopping:
            raise _StopJob()
        st = self._begin_cycle(worker_group)
        monitor = self._new_monitor(st)
        self._heartbeats.start_cycle(monitor, authenticated=True)  # see set_workers below
        self._monitor = monitor
        os.environ[ENV_SOCKET] = self._heartbeats.path
        os.environ[ENV_CYCLE] = str(st.cycle)
        with self._state_lock:  # the newest complete checkpoint reported (docs/checkpointing.md)
            resume = self._resume
        if resume is not None:
            os.environ[ENV_RESUME] = resume[1]
            self.say(f"cycle {st.cycle}: newest complete checkpoint step {resume[0]}: {resume[1]}")
        st.fr_dir = fr_dumps.cycle_env(os.environ, self._fr_user, self.settings.job_dir, st.cycle)
        ranks = [w.global_rank for w in worker_group.workers]
        multi = self.settings.max_nodes > 1  # several nodes: scores through the store
        self._stragglers.start_cycle(
            st.cycle, st.node, ranks, os.environ,
            store=worker_group.store if multi else None, nodes=worker_group.group_world_size or 1,
        )  # fmt: skip
        pids = super()._start_workers(worker_group)
        by_local = {w.local_rank: w.global_rank for w in worker_group.workers}
        st.exits = ExitTimes({by_local[lr]: pid for lr, pid in pids.items() if lr in by_local})
        # a datagram counts only from the worker (or a child of it) of the rank it names
        self._heartbeats.set_workers(
            {pid: by_local[lr] for lr, pid in pids.items() if lr in by_local}
        )
        install_signal_handlers()  # elastic installed its own (same effect, not remembered)
        self._gate_open = False  # see _maybe_release_analysis
        self._wrap_close(st)
        st.log.add_ranks({w.local_rank: w.global_rank for w in worker_group.workers}, st.spool)
        self._health.start_cycle()
        return pids

    def _new_monitor(self, st: _CycleState) -> RankMonitor:
        """The cycle's hang monitor: explicit timeouts, replaced by calculated ones
        (`--ft-calculate-timeouts`, launcher.timeouts_auto) once enough was observed."""
        s, auto = self.settings, self._auto_timeouts
        recorder = auto.recorder(st.node) if auto is not None else None  # loads stored values
        eff = effective(
            s.ft_heartbeat_timeout,
            s.ft_initial_heartbeat_timeout,
            s.ft_rank_section_timeouts,
            s.ft_rank_out_of_section_timeout,
            auto.current if auto is not None else None,
        )
        if auto is not None:
            st.log.event(auto.fact(st.cycle, eff))
        return RankMonitor(
            st.cycle,
            eff.heartbeat,
            eff.initial,
            section_timeouts=eff.sections,
            out_of_section_timeout=eff.out_of_section,
            calculated=eff.calculated,
            recorder=recorder,
        )

    def _wrap_close(self, st: _CycleState) -> None:
        """Honour --workers-stop-timeout everywhere and remember which ranks failed first.

        Elastic's process context closes the surviving workers itself (SIGTERM, then SIGKILL
        after a fixed 30 s) as soon as one fails; the wrapper gives that close our timeout
        and records the ranks that had failed before it, so the log names the root failure.
        """
        pc = self._pcontext
        if pc is None:
            return
        original = pc.close
        timeout_s = self.settings.workers_stop_timeout

        def close(death_sig: signal.Signals | None = None, timeout: float | None = None) -> None:
            if st.first_failed is None:
                st.first_failed = set(getattr(pc, "_failures", {}).keys())
                st.first_failed_at = time.monotonic()
                self._dumps_on_timeout(st)  # before any survivor is closed
            # torch annotates `timeout: int` but uses it as seconds in float arithmetic
            original(death_sig, timeout_s if timeout is None else timeout)  # type: ignore[arg-type]

        pc.close = close  # type: ignore[method-assign]

    def _dumps_on_timeout(self, st: _CycleState) -> None:
        """A worker that died on a collective timeout wrote its own Flight Recorder dump
        (`launcher.fr_worker`'s exception hook; gloo dumps nothing itself). Before elastic
        closes the survivors, ask them for theirs (bounded): the rank that never entered
        the collective is among them. On several nodes every node is asked first through
        the round's store, as for a heartbeat-declared hang, and this node waits (bounded)
        until the others dumped before any of its workers is closed."""
        if st.fr_done or st.fr_dir is None:
            return
        have = set(fr_dumps.dumped(st.fr_dir, st.ranks))
        if not have:
            return  # no rank dumped on a timeout: a plain crash, nothing to ask
        st.fr_done = True
        wg = self._worker_group
        node = wg.group_rank if self.settings.max_nodes > 1 else None  # None: one node
        dead = {st.ranks[i] for i in st.first_failed or () if 0 <= i < len(st.ranks)}
        seen = self._monitor.ranks_seen() if self._monitor is not None else set()
        want = (set(st.ranks) & seen) - (dead - have)  # a dead rank without a dump: none comes
        try:
            if node is not None:
                fr_dumps.ask_nodes(wg.store, f"collective timeout on node {node}")
            got = fr_dumps.request(st.fr_dir, sorted(want | have))
            if node is not None:
                fr_dumps.mark_done(wg.store, node, len(got))
                world = wg.group_world_size or 1
                answered = fr_dumps.wait_nodes(wg.store, world)
                if len(answered) < world:
                    self._warn(
                        f"flight recorder: {world - len(answered)} node(s) did not dump "
                        f"within {fr_dumps.NODES_WAIT_S:g} s"
                    )
        except Exception as exc:  # noqa: BLE001 - the store went away: close the workers anyway
            self._warn(f"flight recorder dumps not collected: {type(exc).__name__}: {exc}")
            return
        ranks = ",".join(map(str, got)) or "none"
        st.log.event(
            f"flight recorder: rank(s) {','.join(map(str, sorted(have)))} dumped on a "
            f"collective timeout; dumps of ranks {ranks} in {st.fr_dir}"
        )

    def _monitor_workers(self, worker_group: WorkerGroup) -> RunResult:
        self._check_signal()
        st = self._state
        with self._state_lock:  # read and mark together: a withdrawal cannot slip between
            v = self.stop_verdict if st is not None and not st.ended else None
            self._stop_applied = self._stop_applied or v is not None
        if v is not None and st is not None:
            st.stopped_by_verdict = True
            st.failure = "stopped by verdict"
            st.log.event(
                f"stopping the job: STOP verdict for cycle {v.cycle}: {v.reason} "
                f"(--ft-attribution-stop-action no-restart)"
            )
            self._remaining_restarts = 0
            return RunResult(state=WorkerState.FAILED)
        sick = self._health.unhealthy()  # found by the run-time health monitor
        if sick is not None and st is not None and not st.ended:
            st.failure = f"node unhealthy during the run: {sick.reason}"
            st.log.event(st.failure)
            self.say(f"cycle {st.cycle}: {st.failure}; stopping the workers")
            self._stop_workers(worker_group)  # ends the cycle as failed
            self._leave_unhealthy(sick)
        result = super()._monitor_workers(worker_group)
        if st is None:
            return result
        self._maybe_release_analysis(st, worker_group)
        if result.state == WorkerState.FAILED:
            if self._gate_open:
                self.attribution.hold()  # a restart follows: analysis waits until it is done
            else:
                # this cycle's workers died before they were up: holding again would starve
                # the analyses queued since (a crash loop spends its whole budget before a
                # verdict arrives); let them run during the restart
                self._gate_open = True
                self.attribution.release()
            st.failure = self._describe_failures(st, result) or "worker group failed"
        elif result.state == WorkerState.SUCCEEDED:
            st.log.event("all ranks exited with code 0")
        elif result.state == WorkerState.HEALTHY:
            multi = self.settings.max_nodes > 1
            if multi and not st.fr_done and fr_dumps.requested(worker_group.store):
                self._fr_dumps(st, worker_group, ask=False)  # another node saw a hang
            hang = self._monitor.find_hang() if self._monitor is not None else None
            if hang is not None:
                self._fr_dumps(st, worker_group, ask=multi)  # before any worker is stopped
                text = hang.describe()
                st.log.event(
                    facts.hang(
                        st.cycle,
                        hang.rank,
                        hang.silent_for,
                        hang.section,
                        hang.initial,
                        hang.others,
                    )
                )
                st.log.event(text)
                self.say(f"cycle {st.cycle}: {text}")
                st.failure = text
                self.attribution.hold()
                return RunResult(state=WorkerState.FAILED)
        return result

    def _fr_dumps(self, st: _CycleState, worker_group: WorkerGroup, *, ask: bool) -> None:
        """Have this node's workers write their Flight Recorder dumps (bounded wait); with
        `ask`, first ask every node through the store and then wait for all of them."""
        if st.fr_done or st.fr_dir is None:
            return
        st.fr_done = True
        store, rank = worker_group.store, worker_group.group_rank
        try:
            if ask:
                fr_dumps.ask_nodes(store, f"hang on node {rank}")
            # only ranks that use relaunch.client have the dump handler: wait for those
            seen = self._monitor.ranks_seen() if self._monitor is not None else set()
            got = fr_dumps.request(st.fr_dir, sorted(set(st.ranks) & set(seen)))
            if self.settings.max_nodes > 1 and rank is not None:
                fr_dumps.mark_done(store, rank, len(got))
                if ask:
                    world = worker_group.group_world_size or 1
                    answered = fr_dumps.wait_nodes(store, world)
                    if len(answered) < world:
                        self._warn(
                            f"flight recorder: {world - len(answered)} node(s) did not dump "
                            f"within {fr_dumps.NODES_WAIT_S:g} s"
                        )
        except Exception as exc:  # noqa: BLE001 - the store or the folder went away: stop anyway
            self._warn(f"flight recorder dumps not collected: {type(exc).__name__}: {exc}")
            return
        ranks = ",".join(map(str, got)) or "none"
        st.log.event(f"flight recorder: dumps of ranks {ranks} in {st.fr_dir}")

    def _maybe_release_analysis(self, st: _CycleState, worker_group: WorkerGroup) -> None:
        """Let queued analyses run once the new workers are up: every local rank has
        talked to the launcher, or RELEASE_AFTER_S passed. Until then the CPU and the GIL
        belong to the restart."""
        if self._gate_open:
            return
        seen = self._monitor.ranks_seen() if self._monitor is not None else set()
        local = {w.global_rank for w in worker_group.workers}
        if local <= seen or time.monotonic() - st.started >= RELEASE_AFTER_S:
            self._gate_open = True
            self.attribution.release()

    def _describe_failures(self, st: _CycleState, result: RunResult) -> str:
        first = st.first_failed
        now = time.monotonic()
        first_t = (st.first_failed_at or now) - st.started
        roots: list[tuple[float, str]] = []
        followers: list[int] = []
        for rank, f in sorted(result.failures.items()):
            is_first = first is None or f.local_rank in first
            exited = st.exits.get(rank) if st.exits is not None else None
            st.log.event(
                facts.rank_exit(
                    st.cycle,
                    rank,
                    f.local_rank,
                    st.node,
                    f.exitcode,
                    is_first,
                    exited - st.started
                    if exited is not None
                    else (first_t if is_first else now - st.started),
                )
            )
            if is_first:  # the earliest exit first (pidfd times; by rank without them)
                roots.append(
                    (exited if exited is not None else now, _describe_exit(rank, f.exitcode))
                )
            else:
                followers.append(rank)
        if followers:
            st.log.event(facts.ranks_stopped(st.cycle, followers))
        roots.sort(key=lambda r: r[0])
        for _, d in roots:
            st.log.event(d)
        if followers:
            st.log.event(
                f"ranks {','.join(map(str, followers))} stopped by the launcher after the failure above"
            )
        return "; ".join(d for _, d in roots)

    def _stop_workers(self, worker_group: WorkerGroup) -> None:
        st = self._state
        if st is not None and not st.ended:
            # wording without signal names: this line is not evidence of a failure
            st.log.event(
                f"stopping workers (terminate, force after {self.settings.workers_stop_timeout:g} s)"
            )
        self._shutdown(timeout=self._shutdown_timeout)
        if st is None or st.ended:
            return
        if st.stopped_by_verdict:
            self._end_cycle(JobState.STOPPED)
        elif st.failure is not None:
            self._end_cycle(JobState.FAILED)
        elif self._ended_elsewhere:  # healthy workers of a job that ended on another node
            st.failure = "stopped by the launcher: the job ended on another node"
            self._end_cycle(JobState.STOPPED)
        else:  # healthy workers restarted because a node joined or left
            st.failure = "stopped by the launcher: the rendezvous membership changed"
            self._end_cycle(JobState.STOPPED)

    def _restart_workers(self, worker_group: WorkerGroup) -> None:
        from relaunch.launcher.rdzv.barrier import BarrierRendezvousHandler

        rdzv = worker_group.spec.rdzv_handler
        if isinstance(rdzv, BarrierRendezvousHandler) and rdzv.closed_reason_now():
            # the job ended on another node (its monitor saw the closed rendezvous): stop
            # this node's workers and end, without a health preflight or a new round, while
            # the store host still waits for this node's acknowledgement
            self._ended_elsewhere = True
            self.say("the job ended on another node; stopping this node's workers")
            self._stop_workers(worker_group)
            rdzv.raise_if_closed()  # acknowledges, raises RendezvousClosedError
        st = self._state
        if st is not None:
            if self.settings.max_nodes > 1:  # elastic counted only this node's failures:
                # the job-wide count is agreed at the next rendezvous (its cycle start line)
                left = "restarts left: agreed by the nodes at the next rendezvous"
            else:
                left = (
                    f"{self._remaining_restarts} of {self.settings.max_restarts} restarts left "
                    "after this one"
                )
            # the log line does not repeat the failure (already logged as evidence above)
            st.log.event(
                f"restart: cycle {st.cycle} failed; starting cycle {st.cycle + 1} ({left})"
            )
            reason = st.failure or "worker group unhealthy"
            self.say(
                f"restart: cycle {st.cycle} failed ({reason}); starting cycle {st.cycle + 1} ({left})"
            )
        super()._restart_workers(worker_group)

    def closing_reason(self) -> str | None:
        """The value that closes the rendezvous as this launcher exits: the job-wide
        outcome, `no_progress` for the progress guard's end (its nodes exit 5, not 3);
        None leaves it open (this node alone is leaving)."""
        if self.terminal is None:
            return None
        return NO_PROGRESS_CLOSE if self._no_progress else str(self.terminal)

    # -- the whole job ------------------------------------------------------------
    def run_job(self) -> int:
        """Run until success, budget spent, STOP or a signal; record the end; return the
        exit code."""
        out = JobOutcome()
        try:
            result = self.run()
            if result is not None and not result.is_failed():
                out.code = ExitCode.OK
            self.terminal = (
                JobState.SUCCEEDED if out.code == ExitCode.OK else JobState.FAILED
            )  # job-wide: budget
        except _StopJob:
            out.code = ExitCode.STOPPED
            self.terminal = JobState.STOPPED
        except _NodeUnhealthy as exc:
            self.unhealthy_reason = str(exc)
            self.say(f"node unhealthy, not joining the rendezvous: {exc}")
            self._event(f"node unhealthy: {exc}")
            out.code = ExitCode.NODE_UNHEALTHY
        except _NoProgress as exc:
            out.code = ExitCode.NO_PROGRESS
            self.terminal = JobState.STOPPED  # the progress guard's decision is job-wide
            self._no_progress = True
            self.say(f"job {self.settings.job_id} ended by the launcher: {exc}")
            self._event(f"job ended (exit code {int(ExitCode.NO_PROGRESS)}): {exc}")
        except RendezvousClosedError:
            out.note = "the rendezvous was closed by another node (the job ended there)"
            reason = getattr(self._worker_group.spec.rdzv_handler, "closed_reason", None)
            if reason == JobState.SUCCEEDED:  # closed while this node waited as a hot spare
                out.code = ExitCode.OK
                out.note = "standby: the job succeeded without needing this node"
            elif reason == JobState.STOPPED:  # a STOP acted on by the node that closed it
                # (a signed value: only the job's launchers hold the secret); the same exit
                # as the nodes that read the verdict themselves
                out.code = ExitCode.STOPPED
                out.note = "job stopped by a verdict (the rendezvous was closed by another node)"
            elif reason == NO_PROGRESS_CLOSE:  # the progress guard of another node
                out.code = ExitCode.NO_PROGRESS
                out.note = "job ended by the launcher's progress guard on another node"
            self.say(out.note)
        except RendezvousError as exc:  # local to this node: the rendezvous stays open
            out.code = ExitCode.RENDEZVOUS
            out.note = f"rendezvous failed on this node: {exc}"
            self.say(out.note)
        except Exception as exc:  # a signal (elastic stopped the workers), maybe masked
            sig = signal_behind(exc)
            if sig is None:
                raise
            self._signal_seen = True
            out.code = signal_code(sig.sigval)
            self.say(f"received {sig.sigval.name}; workers stopped")
        finally:
            st = self._state
            if st is not None and not st.ended:
                if out.interrupted:
                    st.failure = st.failure or "interrupted by a signal"
                self._end_cycle(out.cycle_end_state(st.stopped_by_verdict))
        self._finish(out)
        return int(out.code)

    def _finish(self, out: JobOutcome) -> None:
        """After the last cycle: wait for (or skip) the last verdict, act on a STOP that
        arrived, say how the job ended, record the end."""
        if out.interrupted:
            self.attribution.skip_analyses()  # the user wants out: records only
        elif out.code != ExitCode.OK and not self.attribution.drain():
            self.say("warning: the last verdict did not arrive within its time budget")
        if out.code == ExitCode.NO_PROGRESS and self.stop_verdict is not None:
            # the guard ended the job at the cycle boundary, before the verdict arrived: its
            # decision (synchronous, the same on every node) stands, the STOP agrees
            v, self.stop_verdict = self.stop_verdict, None
            self.recorded_stops.append(v)
        stop = self.stop_verdict
        if stop is not None and out.apply_stop(stop):
            if self.terminal is not None:
                self.terminal = JobState.STOPPED
            self.say(f"job stopped by verdict for cycle {stop.cycle}: {stop.reason}")
            self._event(
                f"job stopped (exit code {int(ExitCode.STOPPED)}): "
                f"STOP verdict for cycle {stop.cycle}"
            )
        elif out.code == ExitCode.OK:
            if self.settings.max_nodes > 1:  # a promoted spare ran fewer cycles than its peers
                self.say(
                    f"job {self.settings.job_id} succeeded in cycle {self._cycle_no} "
                    f"(this node ran {self._cycles_started} cycle(s))"
                )
            else:
                self.say(
                    f"job {self.settings.job_id} succeeded after {self._cycles_started} cycle(s)"
                )
        elif out.code == ExitCode.FAILED and out.note is None:
            self.say(
                f"job {self.settings.job_id} failed: restart budget ({self.settings.max_restarts}) spent"
            )
            self._event(f"job failed (exit code {int(ExitCode.FAILED)}): restart budget spent")
        for v in self.recorded_stops:
            self.say(
                f"note: STOP verdict for cycle {v.cycle} was recorded, not acted on: {v.reason}"
            )
        self._record_final(out)
        self._flush_late_lines()

    def _record_final(self, out: JobOutcome) -> None:
        """The job's final state and exit code go to the history, when this node ends the
        job (`JobOutcome.record`)."""
        final = out.record(
            max_restarts=self.settings.max_restarts,
            max_nodes=self.settings.max_nodes,
            stop=self.stop_verdict,
            no_progress_reason=self.no_progress_reason,
            unhealthy_reason=self.unhealthy_reason,
        )
        if final is None:
            return
        self.final = final
        self.attribution.end_job(self.settings.job_id, *final)

    def abandon_flush(self) -> None:
        """A signal after the first: stop waiting for the history (called from a signal
        handler: sets flags only)."""
        self.attribution.abandon()

    def close(self) -> None:
        """Flush the history (sized to the work queued), then stop the helpers."""
        try:
            self._health.stop_cycle(wait_s=5.0)
            self.attribution.close()
        finally:
            self._heartbeats.close()


def build_spec(settings: RunSettings) -> WorkerSpec:
    """The elastic WorkerSpec and rendezvous handler (c10d by default), as torchrun does."""
    rdzv_configs: dict[str, Any] = dict(_parse_rendezvous_config(settings.rdzv_conf))
    if settings.rdzv_backend == "static":
        rdzv_configs["rank"] = settings.node_rank
    params = RendezvousParameters(
        backend=settings.rdzv_backend,
        endpoint=settings.rdzv_endpoint,
        run_id=settings.rdzv_id,
        min_nodes=settings.min_nodes,
        max_nodes=settings.max_nodes,
        local_addr=settings.local_addr or None,  # torchrun's --local-addr
        **rdzv_configs,
    )
    master_addr = master_port = None
    if settings.rdzv_backend == "static":
        host, _, port = settings.rdzv_endpoint.rpartition(":")
        master_addr, master_port = host, int(port)
    entrypoint, args = settings.worker_command()  # torchrun's -m, --no-python, --run-path
    return WorkerSpec(
        role=settings.role,
        local_world_size=settings.nproc_per_node,
        entrypoint=entrypoint,
        args=args,
        rdzv_handler=make_rdzv_handler(settings, params),
        max_restarts=settings.max_restarts,
        monitor_interval=settings.monitor_interval,
        master_addr=master_addr,
        master_port=master_port,
        local_addr=settings.local_addr or None,
    )


def make_rdzv_handler(settings: RunSettings, params: RendezvousParameters) -> Any:
    """The barrier rendezvous for `--rdzv-backend c10d` (default), else torch's registry
    (`static`, `etcd`, or `--ft-rdzv-impl c10d`: torch's dynamic rendezvous)."""
    if uses_barrier(settings):
        from relaunch.launcher.rdzv.barrier import BarrierRendezvousHandler

        return BarrierRendezvousHandler(
            params,
            infra_rank=settings.infra_rank,
            segment=settings.ft_segment,
            segment_id=settings.segment_id,
            secret=settings.job_secret,
        )
    return rdzv_registry.get_rendezvous_handler(params)


def funnel_sink_factory(address: str) -> Any:
    """Cycle logs to the gRPC log funnel writer at `address` (its root: the job dir)."""
    from relaunch.launcher.funnel import FunnelSink

    def make(path: str, cycle: int, node: int | None) -> LineSink:
        return FunnelSink(address, Path(path).name, node_id=f"node{node or 0}")

    return make


def refusal(settings: RunSettings) -> str | None:
    """Why this job is refused before anything starts (one line), or None."""
    # fixed (--nnodes N) or elastic (--nnodes MIN:MAX) alike: any round may have several
    # nodes, and one node's embedded engine must neither judge nor end the job alone
    if settings.max_nodes > 1 and settings.ft_attribution_endpoint == "embedded":
        return EMBEDDED_MULTINODE.format(nnodes=settings.nnodes)
    return None


def launch(
    settings: RunSettings, out: TextIO = sys.stderr, sink_factory: Any = None
) -> LaunchResult:
    """Run one `relaunch run` job to its end: its exit code (see docs/launcher.md), final
    state and the verdicts received, read after the history is flushed. A single-node job
    holds its job directory for the run (`launcher.job_lock`): a second launcher of the
    same job on this host gets exit 2."""
    if (why := refusal(settings)) is not None:
        print(f"relaunch: error: {why}", file=out, flush=True)
        return LaunchResult(2)
    settings.job_dir.mkdir(parents=True, exist_ok=True)
    if settings.max_nodes > 1:
        with _torch_store_sharing_off(settings):
            return _launch(settings, out, sink_factory)
    try:
        lock, warning = job_lock.acquire(settings.job_dir)
    except job_lock.JobLocked as exc:
        print(f"relaunch: error: {exc}; no worker was started", file=out, flush=True)
        return LaunchResult(2)
    if warning:
        print(f"relaunch: warning: {warning}", file=out, flush=True)
    try:
        with _torch_store_sharing_off(settings):
            return _launch(settings, out, sink_factory)
    finally:
        job_lock.release(lock)


@contextlib.contextmanager
def _torch_store_sharing_off(settings: RunSettings) -> Iterator[None]:
    """`TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` for this launch when torch's rendezvous runs it.

    torch 2.13's c10d rendezvous shares one TCPStore across rounds and the workers reuse it
    without a per-attempt prefix, so after a restart gloo can read the dead cycle's addresses
    ("connectFullMesh failed ... Connection refused") or wait on them; with sharing off,
    worker rank 0 hosts a fresh store per round. The barrier rendezvous hosts a fresh one per
    round itself (`launcher.rdzv.worker_store`). A value the user set is kept; the one set here is
    removed afterwards, so a later in-process launch does not inherit it.
    """
    if uses_barrier(settings) or DISABLE_ENV in os.environ:
        yield
        return
    os.environ[DISABLE_ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(DISABLE_ENV, None)


def _launch(settings: RunSettings, out: TextIO, sink_factory: Any) -> LaunchResult:
    if "OMP_NUM_THREADS" not in os.environ and settings.nproc_per_node > 1:
        os.environ["OMP_NUM_THREADS"] = "1"  # as torchrun does
    os.environ.setdefault("TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT")

    def attribution_factory(on_verdict: Any, on_warning: Any) -> AttributionClient:
        return make_client(
            settings.ft_attribution_endpoint,
            on_verdict,
            on_warning,
            db_url=settings.db_url(),
            audit_dir=settings.audit_dir(),
            llm_config=settings.llm_config,
            policy=settings.policy(),
            token=attribution_token(settings),
        )

    if sink_factory is None and settings.ft_log_funnel and settings.ft_log_funnel != "auto":
        sink_factory = funnel_sink_factory(settings.ft_log_funnel)
    SIGNALS.clear()
    previous = install_signal_handlers()
    agent: RelaunchAgent | None = None
    code = int(ExitCode.FAILED)
    try:
        spec = build_spec(settings)
        if settings.numa_binding:
            from relaunch.launcher.numa import NumaError, apply_numa_binding

            try:
                line = apply_numa_binding(spec, settings.numa_binding, settings.nproc_per_node)
            except NumaError as exc:
                print(f"relaunch: error: --numa-binding: {exc}", file=out, flush=True)
                return LaunchResult(int(ExitCode.USAGE))
            print(f"relaunch: {line}", file=out, flush=True)
        agent = RelaunchAgent(
            spec,
            settings,
            RankLogsSpecs(str(settings.job_dir)),
            attribution_factory,
            out,
            sink_factory,
        )
        if hasattr(spec.rdzv_handler, "report") and settings.max_nodes > 1:  # node roles
            spec.rdzv_handler.report = agent.say
        if hasattr(spec.rdzv_handler, "warn"):  # e.g. the workers' store fell back
            spec.rdzv_handler.warn = agent._warn
        SIGNALS.on_later.append(agent.abandon_flush)
        code = agent.run_job()
    except SignalException as exc:  # before the agent ran (building the rendezvous)
        code = signal_code(exc.sigval)
        print(f"relaunch: received {exc.sigval.name}; no worker was started", file=out)
    except RendezvousError as exc:  # building the rendezvous: the store is unreachable
        code = int(ExitCode.RENDEZVOUS)
        print(f"relaunch: error: {exc}; no worker was started", file=out, flush=True)
    finally:
        if agent is not None:
            agent.close()
            if agent.abandon_flush in SIGNALS.on_later:
                SIGNALS.on_later.remove(agent.abandon_flush)
        # Only a job-wide outcome closes the shared rendezvous (NVRx #421): success, the
        # restart budget spent, a STOP acted on. A node that leaves (unhealthy), is
        # interrupted or fails locally (an exception in this launcher) leaves it open: with
        # --nnodes MIN:MAX the others go on without it, and a replacement node may join.
        if agent is not None:
            handler = agent._worker_group.spec.rdzv_handler
            with contextlib.suppress(Exception):  # closing the rendezvous is best effort
                from relaunch.launcher.rdzv.barrier import on_exit

                on_exit(handler, agent.closing_reason())
            agent.close_funnel()  # the others saw the end (on_exit waits for them)
        for sig, handler in previous.items():  # the caller's handlers (a CLI ignores them)
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(sig, handler)
    if agent is None:
        return LaunchResult(code)
    state, _, reason = agent.final or (None, code, None)
    return LaunchResult(code, state, reason, dict(agent.verdicts))
