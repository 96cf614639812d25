"""How a job ended and what its deciding verdict did: acted on, or only recorded.

A verdict is advice to the launcher. A RESTART acted when a later cycle started; a STOP
acted only when the launcher ended the job on it (`--ft-attribution-stop-action
no-restart`: exit code 3, end reason "STOP verdict for cycle N: ..."). Otherwise it was
recorded (the launcher went on, or the job ended for another reason: the restart budget,
the progress guard, a signal), or, while the job runs and the verdict is on its latest
cycle, it is pending (the launcher acts on it next). Pure functions over stored columns
(stdlib only): the repository (`JobRecord`, the dashboard's overviews) and the dashboard
use the same answer.
"""

from __future__ import annotations

from relaunch.restart_agent.model import Decision

EXIT_STOPPED = 3  # launcher.agent: a STOP verdict acted on
# states only a launcher sets: the job is over even without an exit code (e.g. "lost")
_OVER = frozenset({"succeeded", "failed", "interrupted", "lost"})
ACTED, RECORDED, PENDING = "acted", "recorded", "pending"


def verdict_effect(
    decision: str | None,
    cycle: int | None,
    last_cycle: int | None,
    exit_code: int | None,
    end_reason: str | None,
    state: str | None = None,
) -> str | None:
    """ACTED, RECORDED or PENDING for the verdict `decision` on `cycle`; None without one."""
    if decision is None or cycle is None:
        return None
    ended = exit_code is not None or state in _OVER
    later = last_cycle is not None and cycle < last_cycle
    if decision == Decision.STOP:
        said = (end_reason or "").startswith(f"STOP verdict for cycle {cycle}:")
        if ended and exit_code == EXIT_STOPPED and said:
            return ACTED
        return RECORDED if ended or later else PENDING
    if later:
        return ACTED
    return RECORDED if ended else PENDING
