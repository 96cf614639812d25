"""The NVRx attrsvc-compatible endpoints: GET /healthz, POST /logs, GET /logs."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import Future
from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from relaunch.attribution.service.deps import StateDep
from relaunch.attribution.service.errors import ERROR_RESPONSES, ApiError
from relaunch.attribution.service.paths import confine
from relaunch.attribution.service.schemas import Health, LogResult, LogSubmission, SubmitResponse
from relaunch.attribution.service.state import recommendation
from relaunch.attribution.service.tracker import TrackedLog
from relaunch.restart_agent.model import Decision, Verdict

router = APIRouter()


async def wait_future(fut: Future[Any], timeout_s: float) -> None:
    """Wait for an analysis without blocking the event loop; errors stay in the future."""
    if fut.done():
        return
    try:
        await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(fut)), timeout_s)
    except Exception:  # noqa: BLE001 - a timeout or the analysis' error (kept in the future)
        return


def still_running(body: dict[str, Any], job_id: str, cycle: int, timeout_s: float) -> JSONResponse:
    """202 for a request that waited `--analysis-timeout` for an analysis still running:
    `body` plus a `message` saying where the verdict will be."""
    body = {
        **body,
        "status": "pending",
        "message": (
            f"analysis still running after {timeout_s:g} s; the verdict will be at "
            f"GET /v1/jobs/{job_id}/cycles/{cycle}/verdict"
        ),
    }
    return JSONResponse(body, status_code=202)


def log_answer(tl: TrackedLog) -> dict[str, Any]:
    """The GET /logs body for one tracked log (pending or completed)."""
    fut = tl.future
    if fut is not None and fut.done() and tl.verdict is None and tl.error is None:
        exc = fut.exception()
        tl.error = getattr(exc, "message", None) or f"analysis failed: {exc!r}"
    verdict = tl.verdict
    result: dict[str, Any] | None = None
    if verdict is not None:
        result = dict(verdict)
        result["module"] = "relaunch"
        typed = Verdict.read(verdict)
        stop = typed is not None and typed.decision == Decision.STOP
        result["state"] = "STOP" if stop else "CONTINUE"
    elif tl.error is not None:
        result = {"module": "relaunch", "state": "error", "error": tl.error}
    return {
        "status": tl.status(),
        "recommendation": recommendation(verdict, tl.error),
        "result": result,
        "job_id": tl.job_id,
        "cycle_id": tl.cycle,
        "log_path": str(tl.path),
        "cached": tl.cached,
        "analysis": {
            "bytes_read": tl.read_total,
            "tail_bytes": tl.tail_bytes,
            "file_resets": tl.resets,
        },
    }


@router.get(
    "/healthz",
    response_model=Health,
    responses={503: {"model": Health, "description": "status fail"}},
    tags=["nvrx"],
)
async def healthz(st: StateDep) -> JSONResponse:
    """Service health: `ok`, `degraded` (serving, with issues) or `fail`."""
    body = st.health()
    return JSONResponse(body, status_code=200 if body["status"] != "fail" else 503)


@router.post("/logs", response_model=SubmitResponse, responses=ERROR_RESPONSES, tags=["nvrx"])
async def post_logs(body: LogSubmission, st: StateDep) -> dict[str, Any]:
    """Register a cycle log; `terminal` starts the final analysis, `progressive` reads it
    as it grows. Returns at once."""
    return await asyncio.to_thread(
        st.submit_log,
        body.log_path,
        user=body.user,
        job_id=body.job_id,
        cycle=body.cycle_id,
        intent=body.analysis_intent,
        fact_key=body.fact_key,
    )


@router.get("/logs", response_model=LogResult, responses=ERROR_RESPONSES, tags=["nvrx"])
async def get_logs(
    st: StateDep,
    log_path: str = Query(..., description="the path used in POST /logs"),
    wait: bool = Query(True, description="wait for the verdict (starts the analysis if needed)"),
    timeout: float | None = Query(None, gt=0, description="longest wait in seconds"),
) -> dict[str, Any]:
    """The verdict of a submitted log: `pending` or `completed` with a recommendation."""
    path = confine(log_path, st.settings.allowed_roots, must_exist=False)  # a few syscalls
    tl = st.tracked(str(path)) or await asyncio.to_thread(st.find_by_path, path)
    if tl is None:
        raise ApiError("not_submitted", f"log was not submitted: {log_path!r}")
    if wait:
        if tl.verdict is None and tl.error is None and tl.future is None:
            await asyncio.to_thread(lambda: os.close(st.open_log(path)))  # 403/404/400
            await asyncio.to_thread(st.analyze, tl)
        if tl.future is not None:
            limit = min(timeout or st.settings.analysis_timeout_s, st.settings.analysis_timeout_s)
            await wait_future(tl.future, limit)
    return log_answer(tl)
