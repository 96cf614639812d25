"""How a `relaunch run` job ends: `ExitCode`, the launcher's exit codes, and `JobOutcome`,
the exit code of one run of the agent with the rules that turn it into the job's end.

The rules (docs/launcher.md): 0 success; 1 the restart budget spent; 2 bad input before
anything started; 3 a STOP verdict acted on; 4 this node's health check failed; 5 the
progress guard ended the job; 6 this node's rendezvous failed; 128+N signal N. A STOP
verdict that arrived turns any other non-signal failure into 3. The history records the
job's final state from the code, unless this node does not end the job: another node
closed the rendezvous, this node's rendezvous failed locally, or it left an elastic job
unhealthy. Pure: no I/O, no agent state.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from enum import IntEnum

from relaunch.launcher.attribution_client import VerdictInfo
from relaunch.restart_agent.model import JobState

SIGNAL_BASE = 128  # exit code of signal N: 128 + N, as a shell reports it


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # workers failed and the restart budget is spent
    USAGE = 2  # a bad option or setting: nothing was started
    STOPPED = 3  # a STOP verdict ended the job (--ft-attribution-stop-action no-restart)
    NODE_UNHEALTHY = 4  # the node health preflight failed before a rendezvous
    NO_PROGRESS = 5  # the launcher's progress guard ended the job (launcher.progress_guard)
    RENDEZVOUS = 6  # this node's rendezvous failed: store unreachable or lost, no round formed


def signal_code(signum: int) -> int:
    """The exit code of a launcher ended by signal `signum` (128+N)."""
    return SIGNAL_BASE + int(signum)


def final_state(code: int, max_restarts: int, stop: VerdictInfo | None) -> tuple[JobState, str]:
    """The job's recorded final state and why, from the launcher's exit code."""
    if code == ExitCode.OK:
        return JobState.SUCCEEDED, "all ranks exited with code 0"
    if code == ExitCode.STOPPED and stop is not None:
        return JobState.STOPPED, f"STOP verdict for cycle {stop.cycle}: {stop.reason}"
    if code == ExitCode.NODE_UNHEALTHY:
        return JobState.FAILED, "the node health check found this node unhealthy"
    if code == ExitCode.NO_PROGRESS:
        return JobState.STOPPED, "no progress (see the progress guard line)"
    if code == ExitCode.RENDEZVOUS:
        return JobState.FAILED, "the rendezvous failed on this node (see the launcher's line)"
    if code > SIGNAL_BASE:
        try:
            name = signal.Signals(code - SIGNAL_BASE).name
        except ValueError:
            name = f"signal {code - SIGNAL_BASE}"
        return JobState.INTERRUPTED, f"the launcher received {name}; workers stopped"
    return JobState.FAILED, f"restart budget ({max_restarts}) spent"


@dataclass
class JobOutcome:
    """The exit code of one `RelaunchAgent.run_job`, and `note`: set when this node does
    not end the job (the rendezvous closed by another node, or failed on this node)."""

    code: int = int(ExitCode.FAILED)
    note: str | None = None

    @property
    def interrupted(self) -> bool:
        """The launcher was ended by a signal."""
        return self.code > SIGNAL_BASE

    def cycle_end_state(self, stopped_by_verdict: bool) -> JobState:
        """The state of a cycle still open when the job ends."""
        if self.code == ExitCode.OK:
            return JobState.SUCCEEDED
        if self.interrupted:
            return JobState.INTERRUPTED
        return JobState.STOPPED if stopped_by_verdict else JobState.FAILED

    def apply_stop(self, stop: VerdictInfo | None) -> bool:
        """A STOP verdict that arrived turns any other non-signal failure into
        `ExitCode.STOPPED`; True when it did."""
        if stop is not None and self.code != ExitCode.OK and not self.interrupted:
            self.code = int(ExitCode.STOPPED)
            return True
        return False

    def record(
        self,
        *,
        max_restarts: int,
        max_nodes: int,
        stop: VerdictInfo | None,
        no_progress_reason: str | None,
        unhealthy_reason: str | None,
    ) -> tuple[JobState, int, str] | None:
        """The (state, exit code, reason) the history records as the job's end; None when
        this node does not end the job: another node closed it, the rendezvous failed on
        this node, or this node leaves an elastic job (unhealthy)."""
        if self.note is not None:
            return None
        if self.code == ExitCode.NODE_UNHEALTHY and max_nodes > 1:
            return None
        state, reason = final_state(self.code, max_restarts, stop)
        if self.code == ExitCode.NO_PROGRESS and no_progress_reason:
            reason = no_progress_reason
        if self.code == ExitCode.NODE_UNHEALTHY and unhealthy_reason:
            reason = f"{reason}: {unhealthy_reason}"[:2000]  # which check, and why
        return state, int(self.code), reason
