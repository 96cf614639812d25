"""Multi-node cycles and launcher leases (`attribution.service.gather`):

- `POST /v1/jobs/{job}/cycles/{n}/nodes/{node}` `{log_path, nodes, group_rank, host}`:
  `node`'s log of the cycle (409 `conflict` when another path is stored for it).
- `POST /v1/jobs/{job}/cycles/{n}/nodes/{node}/end` `{outcome}`: `node`'s part ended.
- `POST /v1/jobs/{job}/cycles/{n}/nodes/{node}/fr` (multipart `files`): `node`'s Flight
  Recorder dumps of the cycle, stored in the service's data dir (a fresh folder per upload),
  read with the other nodes' dumps when the cycle is analysed: no shared log dir needed.
- `GET /v1/jobs/{job}/cycles/{n}/nodes`: the node logs and the one verdict of the cycle
  (`status`: waiting | pending | completed | failed).
- `POST /v1/jobs/{job}/lease` `{node, host, cycle, release}`: renew (or release) a
  launcher's lease; the answer says how often to renew.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, File, UploadFile
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from relaunch.attribution.service import fr_uploads
from relaunch.attribution.service.deps import CycleNo, JobId, StateDep
from relaunch.attribution.service.errors import ERROR_RESPONSES, ApiError
from relaunch.storage import node_logs

router = APIRouter(prefix="/v1", tags=["v1"], responses=ERROR_RESPONSES)

NodeOutcome = Literal["succeeded", "failed", "stopped", "interrupted"]


class NodeLogIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    log_path: str = Field(min_length=1, max_length=4096)
    nodes: StrictInt | None = Field(default=None, ge=1, le=1_000_000)
    group_rank: StrictInt | None = Field(default=None, ge=0, le=1_000_000)
    host: str | None = Field(default=None, max_length=255)
    # where the node's launcher puts the cycle's Flight Recorder dumps (read at analysis,
    # inside the allowed roots only)
    fr_dir: str | None = Field(default=None, min_length=1, max_length=4096)


class NodeEndIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    outcome: NodeOutcome | None = None
    # this node asks for the cycle's verdict (default true); a cycle no node asked about
    # (stopped by a verdict, succeeded) is not analysed
    analyse: StrictBool = True
    # the node's launcher's key of this cycle's facts (64 hex), sent once its workers are
    # gone: the cycle's analysis counts only facts signed with its nodes' keys
    fact_key: str | None = Field(default=None, pattern="^[0-9a-f]{64}$")


class LeaseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    node: str = Field(min_length=1, max_length=255)
    host: str | None = Field(default=None, max_length=255)
    cycle: StrictInt | None = Field(default=None, ge=0, le=2**31 - 1)
    release: StrictBool = False


def _node(node: str) -> str:
    try:
        return node_logs.check_node(node)
    except ValueError as exc:
        raise ApiError("invalid_parameter", str(exc)) from None


@router.post("/jobs/{job_id}/cycles/{cycle}/nodes/{node}")
async def register_node_log(
    job_id: JobId, cycle: CycleNo, node: str, body: NodeLogIn, st: StateDep
) -> dict[str, Any]:
    """Register `node`'s log of the cycle (stored per node, never overwritten)."""
    return await asyncio.to_thread(
        st.gather.register,
        job_id,
        cycle,
        _node(node),
        body.log_path,
        nodes=body.nodes,
        group_rank=body.group_rank,
        host=body.host,
        fr_dir=body.fr_dir,
    )


@router.post("/jobs/{job_id}/cycles/{cycle}/nodes/{node}/end")
async def end_node_log(
    job_id: JobId, cycle: CycleNo, node: str, body: NodeEndIn, st: StateDep
) -> dict[str, Any]:
    """`node`'s part of the cycle ended: analysed with the others when all are in."""
    name = _node(node)
    if body.fact_key is not None:
        st.hand_over_fact_key(job_id, cycle, name, body.fact_key)
    return await asyncio.to_thread(
        st.gather.end, job_id, cycle, name, body.outcome, analyse=body.analyse
    )


@router.post("/jobs/{job_id}/cycles/{cycle}/nodes/{node}/fr")
async def upload_node_fr(
    job_id: JobId,
    cycle: CycleNo,
    node: str,
    st: StateDep,
    files: Annotated[list[UploadFile], File(description="Flight Recorder dumps, one per rank")],
) -> dict[str, Any]:
    """Store `node`'s Flight Recorder dumps of the cycle for the analysis over all nodes
    (the node must have registered its log; the dumps are read, bounded, at analysis)."""
    who = _node(node)
    if not files or len(files) > fr_uploads.MAX_FR_FILES:
        raise ApiError("invalid_parameter", f"send 1 to {fr_uploads.MAX_FR_FILES} dump files")
    logs = await asyncio.to_thread(node_logs.node_logs, st.repo, job_id, cycle)
    if not any(r.node == who for r in logs):
        raise ApiError("not_found", f"job {job_id} cycle {cycle}: node {who} registered no log")
    assert st.settings.data_dir is not None
    dest = fr_uploads.node_upload_dir(st.settings.data_dir, job_id, cycle, who)
    try:
        paths = await fr_uploads.save(files, dest)
    except (ValueError, OSError) as exc:  # save removed the folder
        raise ApiError("invalid_parameter", f"not usable Flight Recorder dumps: {exc}") from None
    return {"job_id": job_id, "cycle": cycle, "node": who, "files": [p.name for p in paths]}


@router.get("/jobs/{job_id}/cycles/{cycle}/nodes")
async def cycle_nodes(job_id: JobId, cycle: CycleNo, st: StateDep) -> dict[str, Any]:
    """The node logs of the cycle and its one verdict."""
    return await asyncio.to_thread(st.gather.status, job_id, cycle)


@router.post("/jobs/{job_id}/lease")
async def lease(job_id: JobId, body: LeaseIn, st: StateDep) -> dict[str, Any]:
    """Renew (or, `release: true`, give up) a launcher's lease on its job."""
    node = _node(body.node)
    timeout = st.settings.lease_timeout_s
    if body.release:
        await asyncio.to_thread(node_logs.release_lease, st.repo, job_id, node)
        return {"job_id": job_id, "node": node, "released": True}
    state = await asyncio.to_thread(
        node_logs.renew_lease, st.repo, job_id, node, host=body.host, cycle=body.cycle
    )
    return {
        "job_id": job_id,
        "node": node,
        "state": state,
        "timeout_s": timeout,
        "renew_every_s": st.settings.lease_renew_every_s,
    }
