"""FastAPI dependencies shared by the service's routes.

`StateDep` is the running `ServiceState`; `JobId` a `{job_id}` path parameter checked by
the one job-id rule; `CycleNo` a `{cycle}` path parameter checked to be 0..2**31-1. A bad
value is an `ApiError("invalid_parameter", ...)`, the same 400 body as before these
checks moved out of the route bodies.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from relaunch.attribution.service.errors import ApiError
from relaunch.attribution.service.state import ServiceState
from relaunch.attribution.service.validation import MAX_CYCLE, check_job_id


def state_of(request: Request) -> ServiceState:
    return request.app.state.service


def _job_id(job_id: str) -> str:
    return check_job_id(job_id)


def _cycle_no(cycle: int) -> int:
    if not 0 <= cycle <= MAX_CYCLE:
        raise ApiError("invalid_parameter", "cycle must be a non-negative integer")
    return cycle


StateDep = Annotated[ServiceState, Depends(state_of)]
JobId = Annotated[str, Depends(_job_id)]
CycleNo = Annotated[int, Depends(_cycle_no)]
