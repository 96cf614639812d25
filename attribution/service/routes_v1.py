"""The versioned API `/v1/...`: jobs, cycles, verdicts, evidence, search, uploads, FR dumps."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, File, Query, Request, UploadFile
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from relaunch.attribution.core.engine import records_node_health
from relaunch.attribution.core.files import safe_name
from relaunch.attribution.service import fr_uploads
from relaunch.attribution.service.deps import CycleNo, JobId, StateDep
from relaunch.attribution.service.errors import ERROR_RESPONSES, ApiError, storage_refusal
from relaunch.attribution.service.routes_nvrx import still_running, wait_future
from relaunch.attribution.service.schemas import (
    FRAnswer,
    NodeHealthAnswer,
    NodeHealthSubmission,
    VerdictAnswer,
)
from relaunch.attribution.service.state import ServiceState
from relaunch.attribution.service.tracker import TrackedLog
from relaunch.restart_agent.model import Verdict

router = APIRouter(prefix="/v1", tags=["v1"], responses=ERROR_RESPONSES)

UPLOAD_CHUNK = fr_uploads.UPLOAD_CHUNK
MAX_FR_FILES = fr_uploads.MAX_FR_FILES


def _job(st: ServiceState, job_id: str) -> dict[str, Any]:
    for job in st.repo.list_jobs():
        if job.job_id == job_id:
            return job.to_dict()
    raise ApiError("not_found", f"unknown job: {job_id!r}")


def _cycle(st: ServiceState, job_id: str, cycle: int) -> Any:
    rec = st.repo.get_cycle(job_id, cycle)
    if rec is None:
        raise ApiError("not_found", f"unknown cycle {cycle} of job {job_id!r}")
    return rec


@router.get("/jobs")
async def list_jobs(st: StateDep) -> dict[str, Any]:
    """All jobs with their state and last verdict."""
    jobs = await asyncio.to_thread(st.repo.list_jobs)
    return {"jobs": [j.to_dict() for j in jobs]}


@router.get("/jobs/{job_id}")
async def get_job(job_id: JobId, st: StateDep) -> dict[str, Any]:
    """One job and its cycles (summaries, without the full verdicts)."""
    job = await asyncio.to_thread(_job, st, job_id)
    cycles = await asyncio.to_thread(st.repo.list_cycles, job_id)
    job["cycle_list"] = [_summary(c) for c in cycles]
    # the newest complete checkpoint any cycle reported (relaunch.checkpoint)
    job["checkpoint"] = _newest_checkpoint(cycles)
    return job


def _newest_checkpoint(cycles: list[Any]) -> dict[str, Any] | None:
    """{cycle, step, tier, size, at} of the highest checkpoint step the cycles stored
    (revision 0010; the later cycle on a tie); None when none reported one."""
    have = [c for c in cycles if c.checkpoint_step is not None]
    if not have:
        return None
    c = max(have, key=lambda c: (c.checkpoint_step, c.cycle))
    at = c.checkpoint_at
    return {
        "cycle": c.cycle,
        "step": c.checkpoint_step,
        "tier": c.checkpoint_tier,
        "size": c.checkpoint_size,
        "at": at.isoformat() if at is not None else None,
    }


def _summary(rec: Any) -> dict[str, Any]:
    d = rec.to_dict()
    for heavy in ("verdict", "evidence", "llm", "fr_findings"):
        d.pop(heavy, None)
    return d


@router.get("/jobs/{job_id}/cycles")
async def list_cycles(job_id: JobId, st: StateDep) -> dict[str, Any]:
    """The cycles of one job, oldest first."""
    await asyncio.to_thread(_job, st, job_id)
    cycles = await asyncio.to_thread(st.repo.list_cycles, job_id)
    return {"job_id": job_id, "cycles": [_summary(c) for c in cycles]}


@router.get("/jobs/{job_id}/cycles/{cycle}")
async def get_cycle(job_id: JobId, cycle: CycleNo, st: StateDep) -> dict[str, Any]:
    """One cycle with its verdict, evidence, FR findings and LLM enrichment."""
    rec = await asyncio.to_thread(_cycle, st, job_id, cycle)
    return rec.to_dict()


@router.get("/jobs/{job_id}/cycles/{cycle}/verdict", response_model=VerdictAnswer)
async def get_verdict(
    job_id: JobId,
    cycle: CycleNo,
    st: StateDep,
    wait: bool = Query(False, description="wait for an analysis in flight"),
) -> dict[str, Any] | JSONResponse:
    """The verdict of one cycle: `pending` while it is being analysed."""
    tl = st.tracked_key(job_id, cycle) or await asyncio.to_thread(st.cycle_log, job_id, cycle)
    if tl is None:
        await asyncio.to_thread(_cycle, st, job_id, cycle)  # 404 if unknown
        return {"job_id": job_id, "cycle": cycle, "status": "pending", "verdict": None}
    limit = st.settings.analysis_timeout_s
    if tl.future is not None and not tl.future.done() and wait:
        await wait_future(tl.future, limit)
        if not tl.future.done():
            return still_running(
                {"job_id": job_id, "cycle": cycle, "verdict": None}, job_id, cycle, limit
            )
    error = tl.error
    if tl.future is not None and tl.future.done() and tl.future.exception() is not None:
        exc = tl.future.exception()
        error = error or getattr(exc, "message", None) or f"analysis failed: {exc!r}"
    if tl.verdict is None and (tl.future is None or tl.future.done()):
        rec = await asyncio.to_thread(_cycle, st, job_id, cycle)
        tl.verdict = rec.verdict
        if rec.verdict is None and rec.analysis_requested_at is None:
            error = error or rec.analysis_error
    status = "completed" if tl.verdict is not None else "failed" if error else "pending"
    return {
        "job_id": job_id,
        "cycle": cycle,
        "status": status,
        "verdict": tl.verdict,
        "cached": tl.cached,
        "error": error if tl.verdict is None else None,
    }


@router.get("/jobs/{job_id}/cycles/{cycle}/evidence")
async def get_evidence(job_id: JobId, cycle: CycleNo, st: StateDep) -> dict[str, Any]:
    """The evidence lines of one cycle's verdict (primary first), cascades and FR findings."""
    rec = await asyncio.to_thread(_cycle, st, job_id, cycle)
    v = Verdict.read(rec.verdict)  # the stored JSON, read once
    return {
        "job_id": job_id,
        "cycle": cycle,
        "primary": v.primary.to_dict() if v is not None and v.primary else None,
        "evidence": rec.evidence or ([e.to_dict() for e in v.evidence] if v else []),
        "cascades": [c.to_dict() for c in v.cascades] if v is not None else [],
        "fr": rec.fr_findings,
    }


@router.get("/search")
async def search(
    st: StateDep,
    fingerprint: str | None = Query(None, max_length=4096),
    failure_class: str | None = Query(None, max_length=128),
    limit: int = Query(100, ge=1, le=1000),
) -> dict[str, Any]:
    """Cycles across all jobs with this fingerprint and/or failure class, newest first."""
    if fingerprint is None and failure_class is None:
        raise ApiError("invalid_parameter", "give fingerprint and/or failure_class")
    rows = await asyncio.to_thread(
        st.repo.search, fingerprint=fingerprint, failure_class=failure_class, limit=limit
    )
    return {"results": [r.to_dict() if hasattr(r, "to_dict") else r for r in rows]}


@router.get("/stats")
async def stats(st: StateDep) -> dict[str, Any]:
    """Counters: analyses started, requests coalesced, cache hits, tracked logs, exports."""
    return st.stats()


def _refuse_while_analysed(st: ServiceState, job_id: str, cycle: int) -> None:
    """409 with Retry-After while the cycle's analysis runs (retry once it is done)."""
    tl = st.tracked_key(job_id, cycle)
    if tl is not None and tl.future is not None and not tl.future.done():
        raise ApiError(
            "cycle_being_analysed",
            "this cycle is being analysed; upload again later",
            headers={"Retry-After": "2"},
        )


def _digest(path: Path) -> tuple[str, int]:
    """SHA-256 and size of an uploaded body (the append-only rule compares digests)."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(UPLOAD_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def upload_path(st: ServiceState, job_id: str, cycle: int) -> Path:
    return st.upload_root / safe_name(job_id) / f"cycle_{cycle}.log"


async def receive_to_temp(stream: AsyncIterator[bytes], directory: Path) -> Path:
    """Write a request body to a new temporary file in `directory`; remove it and re-raise
    when the body is rejected on the way (size limit: ApiError 413; client gone)."""
    await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
    fd, name = await asyncio.to_thread(tempfile.mkstemp, prefix=".upload-", dir=directory)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as fh:
            async for chunk in stream:
                if chunk:
                    await asyncio.to_thread(fh.write, chunk)
    except ClientDisconnect:
        await asyncio.to_thread(_unlink_quietly, tmp)
        raise ApiError("invalid_parameter", "the client left before the body ended") from None
    except BaseException:
        await asyncio.to_thread(_unlink_quietly, tmp)
        raise
    return tmp


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _install_upload(tl: TrackedLog, tmp: Path, dest: Path, append: bool) -> None:
    """Make the accepted upload `tmp` the stored log: appended to it, or replacing it."""
    with tl.lock:
        if not append:
            os.replace(tmp, dest)
            tl.scanner, tl.offset, tl.file_id = None, 0, None
            return
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        with open(tmp, "rb") as src, os.fdopen(os.open(dest, flags, 0o600), "ab") as out:
            shutil.copyfileobj(src, out, UPLOAD_CHUNK)


@router.post(
    "/jobs/{job_id}/cycles/{cycle}/log",
    response_model=VerdictAnswer,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        }
    },
)
async def upload_log(
    job_id: JobId,
    cycle: CycleNo,
    st: StateDep,
    request: Request,
    append: bool = Query(False, description="append to what was uploaded before"),
    final: bool = Query(True, description="the log is complete: analyse it"),
    wait: bool = Query(True, description="with final: wait for the verdict"),
) -> dict[str, Any] | JSONResponse:
    """Upload a cycle log's bytes (for hosts that share no filesystem with the service).

    Send the whole log, or send it in pieces with `append=true&final=false` and end with
    `final=true`: each piece is read incrementally, so the verdict costs only the last one."""
    dest = upload_path(st, job_id, cycle)
    _refuse_while_analysed(st, job_id, cycle)
    st.check_storage()  # a write the database cannot keep is refused before it is read
    # the body goes to a temporary file first: a rejected upload (over the size limit,
    # client gone, a conflict with the stored log) never touches the stored log, its
    # verdict or the history
    tmp = await receive_to_temp(request.stream(), dest.parent)
    try:
        _refuse_while_analysed(st, job_id, cycle)
        digest, size = await asyncio.to_thread(_digest, tmp)
        conflict = await asyncio.to_thread(
            st.repo.log_conflict,
            job_id,
            cycle,
            log_path=str(dest),
            sha256=None if append else digest,
            appending=append,
        )
        if conflict is not None:
            raise ApiError("conflict", conflict)
        max_bytes = st.settings.max_upload_bytes
        stored = dest.stat().st_size if append and dest.exists() else 0
        if stored + size > max_bytes:  # every upload path honours the limit, appends too
            raise ApiError(
                "payload_too_large",
                f"the cycle's log would be {stored + size} bytes, over the limit of {max_bytes}",
            )
        tl = st.tracked_key(job_id, cycle)
        if tl is None or tl.path != dest:
            tl = st.track(dest, job_id, cycle, intent="upload")
        await asyncio.to_thread(_install_upload, tl, tmp, dest, append)
    finally:
        await asyncio.to_thread(_unlink_quietly, tmp)
    st._remember(tl)
    await asyncio.to_thread(st.repo.register_cycle, job_id, cycle, str(dest))
    if tl.future is not None:
        tl.future, tl.verdict, tl.error, tl.cached = None, None, None, False
    await asyncio.to_thread(st.feed_now, tl)
    if not final:
        return {"job_id": job_id, "cycle": cycle, "status": "pending", "verdict": None}
    fut = await asyncio.to_thread(st.analyze, tl, force=True)
    limit = st.settings.analysis_timeout_s
    if wait:
        await wait_future(fut, limit)
        if not fut.done():
            return still_running(
                {"job_id": job_id, "cycle": cycle, "verdict": None}, job_id, cycle, limit
            )
    if fut.done() and fut.exception() is not None:
        exc = fut.exception()
        if isinstance(exc, ApiError):
            raise exc
        refusal = storage_refusal(exc)
        if refusal is not None:  # the verdict could not be stored: not acknowledged
            raise refusal
        raise ApiError("internal_error", f"analysis failed: {type(exc).__name__}")
    done = fut.done()
    return {
        "job_id": job_id,
        "cycle": cycle,
        "status": "completed" if done else "pending",
        "verdict": fut.result() if done else None,
    }


@router.post("/jobs/{job_id}/cycles/{cycle}/fr", response_model=FRAnswer)
async def upload_fr(
    job_id: JobId,
    cycle: CycleNo,
    st: StateDep,
    files: Annotated[list[UploadFile], File(description="Flight Recorder dumps, one per rank")],
    analyse: Annotated[
        bool,
        Query(description="re-decide the cycle now (false: the cycle's next analysis uses them)"),
    ] = True,
) -> dict[str, Any] | JSONResponse:
    """Store Flight Recorder dumps with a cycle, analyse them, and re-decide the cycle's
    verdict with the culprit ranks as evidence (when the cycle's log is known). With
    `analyse=false` (a launcher sending its dumps just before it asks for the cycle's
    verdict) the findings are stored and the cycle's next analysis joins them."""
    if not files or len(files) > MAX_FR_FILES:
        raise ApiError("invalid_parameter", f"send 1 to {MAX_FR_FILES} dump files")
    assert st.settings.data_dir is not None
    # every upload gets its own directory: a bad upload never overwrites stored dumps
    base = fr_uploads.cycle_dir(st.settings.data_dir, job_id, cycle)
    dest_dir = base / f"upload-{time.time_ns()}"
    try:
        paths = await fr_uploads.save(files, dest_dir)
    except (ValueError, OSError) as exc:  # save removed the folder
        raise ApiError("invalid_parameter", f"not usable Flight Recorder dumps: {exc}") from None
    try:
        from relaunch.attribution import fr as fr_mod

        # workers=1: never fork reader processes from inside the service's threads.
        findings = await asyncio.to_thread(fr_mod.analyze_paths, [str(p) for p in paths], workers=1)
    except (ValueError, OSError) as exc:
        await asyncio.to_thread(shutil.rmtree, dest_dir, True)
        raise ApiError("invalid_parameter", f"not usable Flight Recorder dumps: {exc}") from None
    except BaseException:
        await asyncio.to_thread(shutil.rmtree, dest_dir, True)
        raise
    # stored once; the engine's re-decision reads their culprit ranks from the cycle
    await asyncio.to_thread(st.engine.store_fr_findings, job_id, cycle, findings)
    verdict = None
    running = False
    tl = await asyncio.to_thread(st.cycle_log, job_id, cycle) if analyse else None
    if tl is not None and await asyncio.to_thread(st.log_readable, tl.path):
        fut = await asyncio.to_thread(st.analyze, tl, force=True)
        await wait_future(fut, st.settings.analysis_timeout_s)
        running = not fut.done()
        if fut.done() and fut.exception() is None:
            verdict = fut.result()
    body = {
        "job_id": job_id,
        "cycle": cycle,
        "files": [p.name for p in paths],
        "findings": findings,
        "verdict": verdict,
    }
    if running:
        return still_running(body, job_id, cycle, st.settings.analysis_timeout_s)
    return body


@router.post("/jobs/{job_id}/cycles/{cycle}/node-health", response_model=NodeHealthAnswer)
async def post_node_health(
    job_id: JobId, cycle: CycleNo, report: NodeHealthSubmission, st: StateDep
) -> dict[str, Any] | JSONResponse:
    """Store a node's health report with a cycle and decide the cycle again so that its
    verdict records the node (when the cycle's log is known); a later report for the same
    node replaces the earlier one."""
    record = report.model_dump(mode="json")
    try:
        note = await asyncio.to_thread(st.engine.store_node_health, job_id, cycle, record)
    except ValueError as exc:  # e.g. NaN in a free-form field: JSON cannot hold it
        raise ApiError("invalid_parameter", f"node health report: {exc}") from None
    verdict = None
    tl = st.tracked_key(job_id, cycle) or await asyncio.to_thread(st.cycle_log, job_id, cycle)
    if tl is not None and await asyncio.to_thread(st.log_readable, tl.path):
        # The service decides through its analysis pool (joining one in flight, capacity,
        # timeout), so it drives the analyses; the engine says when the verdict is current.
        # A joined analysis may have read the records before this one was stored: one more.
        for _ in range(2):
            try:
                fut = await asyncio.to_thread(st.analyze, tl, force=True)
            except ApiError as exc:  # overloaded: the record is stored, the next analysis reads it
                if exc.error_code != "overloaded":
                    raise
                break
            await wait_future(fut, st.settings.analysis_timeout_s)
            if not fut.done():
                body = {"job_id": job_id, "cycle": cycle, "node": report.node, "verdict": None}
                return still_running(body, job_id, cycle, st.settings.analysis_timeout_s)
            if fut.exception() is not None:
                break
            verdict = fut.result()
            if records_node_health(verdict, note):
                break
    return {"job_id": job_id, "cycle": cycle, "node": report.node, "verdict": verdict}
