"""The MCP server for agents: relaunch's history and analysis as Model Context Protocol tools.

`build_server(repo, allowed_roots, dashboard_url=None) -> MCPServer` (mcp SDK v2) registers
six tools, each with a JSON schema for its arguments (from the type hints) and for its
structured result (from the pydantic result models below):

- `list_jobs` — jobs with state and last verdict;
- `get_job_verdicts` — one job's verdict history, cycle by cycle;
- `explain_cycle` — one cycle's verdict: evidence lines, rule, budgets, history counts,
  FR findings, LLM explanation, audit path, and what to do next;
- `analyze_log` — analyse a log file (confined to the allowed roots) with the job's
  history, optionally saving the verdict;
- `search_history` — cycles of every job by fingerprint / failure class / decision;
- `analyze_fr_dumps` — NCCL Flight Recorder dumps (confined) to culprit ranks;
- `stragglers` — the launcher's straggler scores per cycle: slow ranks named, the
  suspect of a timeout (docs/straggler.md).

Bad arguments become tool errors (`isError: true`) with a one-line message; nothing
is written unless `analyze_log(save=true)` is asked for. `relaunch mcp` (relaunch_cli/mcp_cmd.py)
runs it over stdio or streamable HTTP; `http_app(...)` is the HTTP app, behind `BearerAuth`
when a token is set.
"""

from __future__ import annotations

import errno
import hmac
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from relaunch.attribution.service.validation import JOB_ID_PATTERN, MAX_CYCLE
from relaunch.restart_agent import safe_files
from relaunch.restart_agent.model import Decision as VerdictDecision
from relaunch.restart_agent.model import StragglerReport as StoredStragglers
from relaunch.restart_agent.model import Verdict
from relaunch.web.advice import next_step

if TYPE_CHECKING:
    from relaunch.storage.records import CycleRecord

INSTRUCTIONS = """\
relaunch keeps distributed PyTorch training jobs alive and STOPs them when restarting is
pointless. Use list_jobs to find a job, get_job_verdicts for its cycle-by-cycle STOP/RESTART
history, explain_cycle for why one verdict was given (evidence lines with line numbers, the
policy rule, budgets left), search_history to find other cycles with the same failure
fingerprint, analyze_log / analyze_fr_dumps for files on this machine under the allowed roots.
"""

MAX_PATH_LEN = 4096
MAX_FR_FILES = 4096


# --------------------------------------------------------------------------- result models
class JobSummary(BaseModel):
    job_id: str
    state: str
    cycles: int = Field(description="stored cycles")
    last_cycle: int | None = None
    last_decision: str | None = Field(
        None,
        description="the deciding verdict: the STOP that stopped the job, else the latest verdict",
    )
    decision_cycle: int | None = Field(None, description="the cycle of last_decision")
    last_rule: str | None = None
    last_failure_class: str | None = None
    updated_at: str | None = None
    dashboard_url: str | None = None


class JobList(BaseModel):
    jobs: list[JobSummary]
    count: int
    truncated: bool = Field(description="true when more jobs exist than `limit`")


class CycleVerdict(BaseModel):
    job_id: str
    cycle: int
    status: str = Field(description="registered (not analysed yet) or analysed")
    decision: str | None = None
    rule: str | None = None
    basis: str | None = Field(None, description="one sentence explaining the decision")
    failure_class: str | None = None
    fingerprint: str | None = None
    domain: str | None = None
    last_iteration: int | None = Field(None, description="progress reached in the cycle")
    llm_contributed: bool | None = None
    started_at: str | None = None
    analysed_at: str | None = None
    dashboard_url: str | None = None


class JobVerdicts(BaseModel):
    job: JobSummary
    cycles: list[CycleVerdict]
    stop_cycles: list[int] = Field(description="cycles whose verdict was STOP")


class CycleExplanation(BaseModel):
    job_id: str
    cycle: int
    decision: str | None
    rule: str | None
    basis: str | None
    next_step: str = Field(description="what an operator or agent should do about this verdict")
    primary: dict[str, Any] | None = Field(
        None,
        description="the initiating failure: failure_class, line, rank, rank_source (how the rank was known; cascade_reporter: the rank only reported a cascade and is not blamed), fingerprint, text",
    )
    evidence: list[dict[str, Any]] = Field(description="evidence lines with their line numbers")
    cascades: list[dict[str, Any]] = Field(description="folded cascade/teardown groups")
    budgets: dict[str, Any]
    history: dict[str, Any] = Field(description="counts over prior cycles of the job")
    progress: dict[str, Any]
    fr_findings: dict[str, Any] | None = None
    node_health: list[dict[str, Any]] = Field(
        default_factory=list,
        description="health reports of nodes that failed (or passed) their check after the cycle",
    )
    llm: dict[str, Any] | None = None
    log: dict[str, Any] = Field(description="path, size and sha256 of the analysed log")
    audit_path: str | None = None
    dashboard_url: str | None = None


class LogAnalysis(BaseModel):
    path: str
    job_id: str | None
    cycle: int | None
    saved: bool = Field(description="whether the verdict was stored in the history")
    prior_cycles_considered: int
    verdict: dict[str, Any] = Field(description="the verdict (relaunch analyze --format json)")


class SearchResults(BaseModel):
    cycles: list[CycleVerdict]
    count: int
    limit: int


class StragglerReport(BaseModel):
    job_id: str
    cycles: list[dict[str, Any]] = Field(
        description="per cycle: named (straggler facts), persistent (ranks), scores (per node), suspect_rank"
    )
    named_ranks: list[int] = Field(description="ranks named persistent stragglers in any cycle")


class FRAnalysis(BaseModel):
    culprit_ranks: list[int]
    files: int = Field(description="dump files read")
    result: dict[str, Any] = Field(description="full analysis: per-process-group breakdown")


# ------------------------------------------------------------------------------ helpers
def confine(raw: str, roots: Sequence[Path], *, allow_dir: bool = False) -> Path:
    """`raw` normalised if it is a file (or, with `allow_dir`, a directory) under a root,
    reached by the walk every read makes (`restart_agent.safe_files`): relative paths,
    `..`, NUL bytes and any symlink below the root are refused."""
    try:
        lexical = safe_files.check_path(raw, MAX_PATH_LEN)
    except safe_files.InvalidPath as exc:
        raise ToolError(f"path {exc.strerror}") from None
    if not roots:
        raise ToolError("no allowed roots configured: start `relaunch mcp --allowed-root DIR`")
    if allow_dir:
        try:
            os.close(safe_files.open_confined_dir(lexical, roots))
            return Path(lexical)
        except OSError as exc:
            if exc.errno != errno.ENOTDIR:
                raise _tool_error(exc, raw) from None
            # not a directory: checked as a file below (the walk refuses a symlink again)
    try:  # the walk every read makes (restart_agent.safe_files): no symlink below the root
        os.close(safe_files.open_confined(lexical, roots))
    except (OSError, ValueError) as exc:
        raise _tool_error(exc, raw) from None
    return Path(lexical)


def _tool_error(exc: Exception, raw: str) -> ToolError:
    """One line per refusal of the file-safety path."""
    if isinstance(exc, safe_files.OutsideRoot):
        return ToolError(f"path is outside the allowed roots: {raw!r}")
    if isinstance(exc, (safe_files.SymlinkRefused, OSError)) and getattr(exc, "errno", 0) in (
        errno.ELOOP,
        errno.ENOTDIR,
        errno.EMLINK,
    ):
        return ToolError(f"a component of the path is a symlink (refused): {raw!r}")
    if isinstance(exc, (safe_files.NotRegularFile, IsADirectoryError)):
        return ToolError(f"not a regular file: {raw!r}")
    if isinstance(exc, FileNotFoundError):
        return ToolError(f"no such file: {raw!r}")
    if isinstance(exc, PermissionError):
        return ToolError(f"not readable: {raw!r}")
    if isinstance(exc, OSError):
        return ToolError(f"cannot access {raw!r}: {exc.strerror or exc}")
    return ToolError(f"invalid path {raw!r}: {exc}")


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _dict(record: Any) -> dict[str, Any]:
    return dict(record.to_dict()) if hasattr(record, "to_dict") else dict(record)


class _Tools:
    """The tool implementations over one repository (sync; called in worker threads)."""

    def __init__(self, repo: Any, roots: Sequence[Path], dashboard_url: str | None) -> None:
        self.repo = repo
        self.roots = [Path(os.path.realpath(r)) for r in roots]
        self.dashboard_url = dashboard_url.rstrip("/") if dashboard_url else None

    def _url(self, job_id: str, cycle: int | None = None) -> str | None:
        if not self.dashboard_url:
            return None
        url = f"{self.dashboard_url}/jobs/{quote(job_id, safe='')}"
        return url if cycle is None else f"{url}/cycles/{cycle}"

    def _job(self, record: Any, deciding: dict[str, Any] | None = None) -> JobSummary:
        d = _dict(record)
        if deciding is not None:  # the verdict that decided, not the last cycle's (maybe none)
            d.update(
                last_decision=deciding["decision"],
                last_rule=deciding["rule"],
                last_failure_class=deciding["failure_class"],
                decision_cycle=deciding["cycle"],
            )
        return JobSummary(
            job_id=d["job_id"],
            state=d.get("state") or "unknown",
            cycles=int(d.get("cycles") or 0),
            last_cycle=d.get("last_cycle"),
            last_decision=d.get("last_decision"),
            last_rule=d.get("last_rule"),
            last_failure_class=d.get("last_failure_class"),
            decision_cycle=d.get("decision_cycle"),
            updated_at=d.get("updated_at"),
            dashboard_url=self._url(d["job_id"]),
        )

    def _cycle(self, record: CycleRecord) -> CycleVerdict:
        d = record.to_dict()  # the JSON form of the times
        return CycleVerdict(
            job_id=record.job_id,
            cycle=record.cycle,
            status=record.status or "unknown",
            decision=record.decision,
            rule=record.rule,
            basis=record.basis,
            failure_class=record.failure_class,
            fingerprint=record.fingerprint,
            domain=record.domain,
            last_iteration=record.last_iteration,
            llm_contributed=record.llm_contributed,
            started_at=d["started_at"],
            analysed_at=d["analysed_at"],
            dashboard_url=self._url(record.job_id, record.cycle),
        )

    def _get_job(self, job_id: str) -> Any:
        try:
            job = self.repo.get_job(job_id)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        if job is None:
            raise ToolError(f"no job {job_id!r} in the history (see list_jobs)")
        return job

    def list_jobs(self, limit: int, state: str | None) -> JobList:
        jobs = self.repo.list_jobs()
        if state:
            jobs = [j for j in jobs if j.state == state]
        deciding = self.repo.deciding_verdicts([j.job_id for j in jobs[:limit]])
        return JobList(
            jobs=[
                self._job(j, (deciding.get(j.job_id) or {}).get("deciding")) for j in jobs[:limit]
            ],
            count=min(len(jobs), limit),
            truncated=len(jobs) > limit,
        )

    def get_job_verdicts(self, job_id: str, last: int | None) -> JobVerdicts:
        job = self._get_job(job_id)
        cycles = self.repo.list_cycles(job_id, with_verdict=False)
        if last is not None:
            cycles = cycles[-last:] if last else []
        rows = [self._cycle(c) for c in cycles]
        return JobVerdicts(
            job=self._job(job),
            cycles=rows,
            stop_cycles=[r.cycle for r in rows if r.decision == VerdictDecision.STOP],
        )

    def explain_cycle(self, job_id: str, cycle: int) -> CycleExplanation:
        self._get_job(job_id)
        rec = self.repo.get_cycle(job_id, cycle)
        if rec is None:
            raise ToolError(f"job {job_id!r} has no cycle {cycle} (see get_job_verdicts)")
        v = Verdict.read(rec.verdict)  # the stored JSON, read once
        primary = v.primary.to_dict() if v is not None and v.primary else None
        fr = v.fr.to_dict() if v is not None and v.fr is not None else None
        notes = [n.to_dict() for n in v.node_health] if v is not None else []
        return CycleExplanation(
            job_id=job_id,
            cycle=cycle,
            decision=rec.decision,
            rule=rec.rule,
            basis=rec.basis,
            next_step=next_step(rec.decision, primary, rec.status or ""),
            primary=primary,
            evidence=list(rec.evidence or ([e.to_dict() for e in v.evidence] if v else [])),
            cascades=[c.to_dict() for c in v.cascades] if v is not None else [],
            budgets=v.budgets.to_dict() if v is not None else {},
            history=v.history.to_dict() if v is not None else {},
            progress=v.progress.to_dict() if v is not None else {},
            fr_findings=rec.fr_findings or fr,
            node_health=notes or list((rec.node_health or {}).values()),
            llm=rec.llm,
            log=rec.log_identity,
            audit_path=rec.audit_path,
            dashboard_url=self._url(job_id, cycle),
        )

    def analyze_log(
        self, path: str, job_id: str | None, cycle: int | None, save: bool
    ) -> LogAnalysis:
        real = confine(path, self.roots)
        if (job_id is None) != (cycle is None):
            raise ToolError("give both job_id and cycle (to use the job's history), or neither")
        if save and job_id is None:
            raise ToolError("save=true needs job_id and cycle")
        from relaunch.attribution.core.engine import AttributionEngine

        known = job_id is not None and cycle is not None
        roots = self.roots
        engine = AttributionEngine(  # every read of the log walks from the root again
            self.repo if known else None, opener=lambda p: safe_files.open_confined(p, roots)
        )
        try:
            prior = len(engine.history(job_id, cycle))
            verdict = engine.analyze_cycle(job_id, cycle, str(real), persist=save)
        except safe_files.FileSafetyError as exc:
            raise _tool_error(exc, path) from None
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        except OSError as exc:
            raise _tool_error(exc, path) from None
        finally:
            engine.close()
        return LogAnalysis(
            path=str(real),
            job_id=job_id,
            cycle=cycle,
            saved=save,
            prior_cycles_considered=prior,
            verdict=verdict.to_dict(),  # the tool result: the edge
        )

    def search_history(
        self,
        fingerprint: str | None,
        failure_class: str | None,
        decision: str | None,
        job_id: str | None,
        limit: int,
    ) -> SearchResults:
        if not (fingerprint or failure_class):
            raise ToolError("give a fingerprint or a failure_class to search for")
        try:
            rows = self.repo.search(
                fingerprint=fingerprint or None,
                failure_class=failure_class or None,
                limit=limit,
                job_id=job_id or None,
                decision=decision or None,
            )
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        return SearchResults(cycles=[self._cycle(r) for r in rows], count=len(rows), limit=limit)

    def analyze_fr_dumps(self, paths: list[str]) -> FRAnalysis:
        from relaunch.attribution import fr

        if not paths:
            raise ToolError("give at least one dump file or directory")
        files: list[Path] = []
        for raw in paths:
            real = confine(raw, self.roots, allow_dir=True)
            if real.is_dir():
                for child in sorted(real.iterdir()):
                    if child.is_dir():
                        continue
                    # A symlink inside an allowed directory must not lead outside it.
                    files.append(confine(str(child), self.roots))
            else:
                files.append(real)
            if len(files) > MAX_FR_FILES:
                raise ToolError(f"more than {MAX_FR_FILES} dump files")
        if not files:
            raise ToolError("no dump files in the given directories")
        try:
            result = fr.analyze_paths([str(f) for f in files])
        except (ValueError, OSError) as exc:
            raise ToolError(str(exc)) from None
        return FRAnalysis(culprit_ranks=fr.culprit_ranks(result), files=len(files), result=result)


# the service's job-id rule and cycle bound (a job or cycle MCP stores must be reachable
# through /v1 and fit the database's 32-bit column)
JobId = Annotated[
    str,
    Field(min_length=1, max_length=255, pattern=JOB_ID_PATTERN, description="the job's --job-id"),
]
Cycle = Annotated[
    int, Field(ge=0, le=MAX_CYCLE, description="cycle number (0 is the first launch)")
]
Decision = Annotated[
    str | None, Field(None, pattern="^(STOP|RESTART)$", description="STOP or RESTART")
]


def build_server(
    repo: Any, allowed_roots: Sequence[str | Path] = (), dashboard_url: str | None = None
) -> MCPServer:
    """The MCP server over `repo`; files are readable only under `allowed_roots`."""
    tools = _Tools(repo, [Path(r) for r in allowed_roots], dashboard_url)
    server = MCPServer("relaunch", instructions=INSTRUCTIONS, log_level="WARNING")

    async def run(fn: Any, *args: Any) -> Any:
        try:
            return await anyio.to_thread.run_sync(fn, *args)
        except ToolError:
            raise
        except Exception as exc:
            if type(exc).__name__ == "StorageError":
                raise ToolError(f"history database unavailable: {exc}") from None
            raise

    @server.tool(
        description="List training jobs with their state and last STOP/RESTART verdict, most recently updated first."
    )
    async def list_jobs(
        limit: Annotated[int, Field(ge=1, le=1000, description="most jobs to return")] = 50,
        state: Annotated[
            str | None,
            Field(
                None, description="only jobs in this state (running, succeeded, failed, stopped)"
            ),
        ] = None,
    ) -> JobList:
        return await run(tools.list_jobs, limit, state)

    @server.tool(
        description="A job's verdict history: one entry per cycle with decision, rule, basis, failure class, fingerprint and progress reached."
    )
    async def get_job_verdicts(
        job_id: JobId,
        last: Annotated[
            int | None, Field(None, ge=0, le=10000, description="only the last N cycles")
        ] = None,
    ) -> JobVerdicts:
        return await run(tools.get_job_verdicts, job_id, last)

    @server.tool(
        description="Explain one cycle's verdict: primary evidence and supporting lines with line numbers, folded cascades, the policy rule, budgets, history counts, FR findings, LLM explanation and the next step."
    )
    async def explain_cycle(job_id: JobId, cycle: Cycle) -> CycleExplanation:
        return await run(tools.explain_cycle, job_id, cycle)

    @server.tool(
        description="Analyse a cycle log file on this machine (absolute path under an allowed root) into a STOP/RESTART verdict. With job_id and cycle the job's earlier cycles count as history; save=true also stores the verdict."
    )
    async def analyze_log(
        path: Annotated[
            str,
            Field(
                min_length=1, max_length=MAX_PATH_LEN, description="absolute path of the log file"
            ),
        ],
        job_id: Annotated[
            str | None, Field(None, min_length=1, max_length=255, pattern=JOB_ID_PATTERN)
        ] = None,
        cycle: Annotated[int | None, Field(None, ge=0, le=MAX_CYCLE)] = None,
        save: Annotated[bool, Field(description="store the verdict in the history")] = False,
    ) -> LogAnalysis:
        return await run(tools.analyze_log, path, job_id, cycle, save)

    @server.tool(
        description="Search every job's analysed cycles by exact failure fingerprint and/or failure class (optionally one job, one decision), most recent first."
    )
    async def search_history(
        fingerprint: Annotated[str | None, Field(None, max_length=4096)] = None,
        failure_class: Annotated[
            str | None, Field(None, max_length=128, description="e.g. cuda_oom")
        ] = None,
        decision: Decision = None,
        job_id: Annotated[str | None, Field(None, max_length=255)] = None,
        limit: Annotated[int, Field(ge=1, le=1000)] = 50,
    ) -> SearchResults:
        return await run(tools.search_history, fingerprint, failure_class, decision, job_id, limit)

    @server.tool(
        description="Analyse NCCL Flight Recorder dumps (files or directories under an allowed root) and name the culprit ranks, with a per-process-group breakdown."
    )
    async def analyze_fr_dumps(
        paths: Annotated[
            list[str],
            Field(
                min_length=1,
                max_length=MAX_FR_FILES,
                description="absolute paths of dump files or directories",
            ),
        ],
    ) -> FRAnalysis:
        return await run(tools.analyze_fr_dumps, paths)

    @server.tool(
        description="A job's straggler reports per cycle (the launcher's section timings): ranks whose relative score stayed below the threshold, every rank's scores per node, and the rank blamed for a later timeout (suspect_rank)."
    )
    async def stragglers(
        job_id: JobId,
        cycle: Annotated[int | None, Field(None, ge=0, description="only this cycle")] = None,
    ) -> StragglerReport:
        def get() -> StragglerReport:
            tools._get_job(job_id)  # an unknown job is an error, not an empty answer
            rows = repo.stragglers(job_id, cycle)
            return StragglerReport(
                job_id=job_id,
                cycles=[{"cycle": c, **s} for c, s in rows],
                named_ranks=sorted(
                    {r for _, s in rows for r in _list(StoredStragglers.from_dict(s).persistent)}
                ),
            )

        return await run(get)

    return server


# --- streamable HTTP with a bearer token ----------------------------------------------


class BearerAuth:
    """ASGI middleware: every HTTP request needs `Authorization: Bearer <token>`.

    The same rule as the service's (`attribution/service/limits.py`): the token is compared
    in constant time (`hmac.compare_digest`); a missing or wrong one gets 401 with a JSON
    error and `WWW-Authenticate: Bearer`, and never reaches the MCP session manager.
    Lifespan events pass through.
    """

    def __init__(self, app: Any, token: str) -> None:
        if not token:
            raise ValueError("BearerAuth needs a non-empty token")
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            auth = b""
            for name, value in scope.get("headers", []):
                if name.lower() == b"authorization":
                    auth = value
            given = auth[7:].strip() if auth[:7].lower() == b"bearer " else b""
            if not hmac.compare_digest(given, self.token):
                body = json.dumps(
                    {"error": "unauthorized", "detail": "missing or wrong bearer token"}
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", b"Bearer"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(server: MCPServer, *, path: str, host: str, token: str | None) -> Any:
    """The streamable-HTTP ASGI app of `server` at `path`, behind `BearerAuth` with a token."""
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    return BearerAuth(app, token) if token else app
