"""`POST /v1/jobs/{job}/cycles/{n}/end` and `POST /v1/jobs/{job}/end`: how cycles and jobs end.

The launcher's HTTP client reports the end of every cycle (its outcome) and the job's
final state with its exit code, so the history of a job run against `relaunch serve`
tells the same truth as the embedded one (`HistoryRepository.end_cycle` / `end_job`).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter
from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field, StrictInt

from relaunch.attribution.service.deps import CycleNo, JobId, StateDep
from relaunch.attribution.service.errors import ERROR_RESPONSES
from relaunch.restart_agent.model import JobState

router = APIRouter(prefix="/v1", tags=["v1"], responses=ERROR_RESPONSES)

ENDINGS = (JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED, JobState.INTERRUPTED)


def _an_ending(value: object) -> object:
    """Accept an ending; refuse anything else in plain words (the Literal alone would
    list enum reprs)."""
    if isinstance(value, str) and value in ENDINGS:
        return JobState(value)
    raise ValueError(f"must be one of {', '.join(ENDINGS)}, not {value!r}")


# how a cycle or a job ends: a `JobState` in the code, its plain value on the wire and in the DB
Ending = Annotated[
    Literal[JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED, JobState.INTERRUPTED],
    BeforeValidator(_an_ending),
]


class CycleEnd(BaseModel):
    """How a cycle ended, as the launcher saw it."""

    model_config = ConfigDict(extra="forbid")

    outcome: Ending
    reason: str | None = Field(default=None, max_length=2000)
    # when the launcher saw the cycle end (its requests may be queued); default: now
    ended_at: AwareDatetime | None = None


class JobEnd(BaseModel):
    """The job's final state and the launcher's exit code."""

    model_config = ConfigDict(extra="forbid")

    state: Ending
    exit_code: StrictInt = Field(ge=0, le=255)
    reason: str | None = Field(default=None, max_length=2000)


@router.post("/jobs/{job_id}/cycles/{cycle}/end")
async def end_cycle(job_id: JobId, cycle: CycleNo, body: CycleEnd, st: StateDep) -> dict[str, Any]:
    """Record the end of a cycle (created when unknown); its verdict, if any, is kept."""
    engine = st.engine  # stores a succeeded cycle's straggler scores too
    await asyncio.to_thread(
        engine.end_cycle, job_id, cycle, body.outcome, reason=body.reason, ended_at=body.ended_at
    )
    return {"job_id": job_id, "cycle": cycle, "outcome": body.outcome}


@router.post("/jobs/{job_id}/end")
async def end_job(job_id: JobId, body: JobEnd, st: StateDep) -> dict[str, Any]:
    """Record the job's final state and exit code (a later verdict does not undo it)."""
    repo = st.repo
    await asyncio.to_thread(repo.end_job, job_id, body.state, body.exit_code, reason=body.reason)
    return {"job_id": job_id, "state": body.state, "exit_code": body.exit_code}
