"""The dashboard router: server-rendered HTML pages over the history repository.

The routes are module-level functions on `router`; each takes the `Dashboard` (the
repository and the log opener) as a dependency (`DashDep`). `create_router(repo_provider)`
returns an `APIRouter` with those routes bound to one repository, which the service mounts
at `/`. `repo_provider` is a `storage.HistoryRepository` or a zero-argument callable that
returns one (so the service can open the database lazily or swap it in tests).

Pages (all readable without JavaScript; `static/live.js` refreshes them while a job runs
by fetching the same URL with `?fragment=1`, which returns only the page's content):

- `/` jobs with their deciding verdict, failing first; filters and state counts;
- `/jobs/{job}` cycle timeline on a time axis, goodput, iterations over time, where
  failures landed (rank/node strips), node-health notes, the cycle table (server SVG);
- `/jobs/{job}/cycles/{n}` verdict, next step, the log excerpt around the primary line,
  evidence, folded cascades, budgets, FR findings, LLM explanation, and
  `/jobs/{job}/cycles/{n}/audit.json`;
- `/jobs/{job}/cycles/{n}/log` the raw log with line anchors (`?around=N`, `?start=N`,
  `?follow=1`), `.../log.txt` the file, `.../log/tail?offset=B` what was written after B
  (JSON; `static/logtail.js` follows a running cycle's log with it);
- `/search?fingerprint=&failure_class=&decision=` history search;
- `/static/{name}` the stylesheet and scripts.

Every page answers GET and HEAD. Logs are read only through `log_access`, which the
service gives (its confined opener over the allowed roots); without it they answer 404.

Everything printed is escaped by Jinja2 autoescaping (log text is untrusted), and every
page carries a Content-Security-Policy that allows only the dashboard's own script.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any, BinaryIO
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    Response,
    StreamingResponse,
)
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader, select_autoescape

from relaunch.restart_agent.model import Decision
from relaunch.storage import dashboard_queries
from relaunch.storage.repository import JOB_STATES
from relaunch.web import charts, logview, views
from relaunch.web.advice import next_step

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
STATIC_TYPES = {".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}
LIVE_INTERVAL_MS = 3000
MAX_AUDIT_BYTES = 32 << 20
SEARCH_LIMIT = 200
# Every page route lives at `/` or under one of these; the service's auth layer uses them
# for `--dashboard-public` (a test checks each route is covered).
PAGE_PREFIXES = ("/jobs", "/search", "/static")
# The raw cycle-log routes: whole logs may hold secrets, so `--dashboard-public` does not
# open them (attribution.service.limits.is_dashboard_read). Errs on the safe side: a job
# whose own id ends like this needs the token for its page too.
RAW_LOG_PATH = re.compile(r"^/jobs/.+/cycles/[^/]+/log(?:\.txt|/tail)?$")
JOBS_LIMIT = 500  # jobs listed on / (failing first, then most recently updated)
WINDOWS = {"1h": 3600, "6h": 6 * 3600, "24h": 86400, "7d": 7 * 86400, "30d": 30 * 86400}
LOG_PAGE_LINES = 500
NODE_NOTES = 30
METHODS = ["GET", "HEAD"]
TIMELINE_LIMIT = 1000  # most recent cycles shown on a job page
FACETS = 30

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}

RepoProvider = Callable[[], Any]
LogAccess = Callable[[str], int]  # a log path -> a read-only file descriptor
_BOOT = f"{os.getpid()}-{time.time_ns()}"  # a restarted (maybe upgraded) server re-renders


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=select_autoescape(("html", "svg", "xml"), default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["urlq"] = lambda s: quote(str(s), safe="")
    return env


def _window_text(window: str, since: datetime | None, until: datetime | None) -> str:
    if window in WINDOWS and since is not None and until is None:
        return f"in the last {window}"
    if since or until:
        a = since.strftime("%Y-%m-%d %H:%M UTC") if since else "the start"
        b = until.strftime("%Y-%m-%d %H:%M UTC") if until else "now"
        return f"active from {a} to {b}"
    return "all time"


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _parse_time(raw: str, name: str) -> datetime | None:
    """An ISO date or date-time (UTC unless it says otherwise), or None when empty."""
    raw = raw.strip()
    if not raw:
        return None
    if len(raw) > 40:
        raise _BadRequest(400, f"{name} is too long")
    try:
        t = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise _BadRequest(
            400, f"{name} must be a date or date-time like 2026-12-03 07:00, got {raw!r}"
        ) from None
    t = t if t.tzinfo else t.replace(tzinfo=timezone.utc)
    try:  # 0001-01-01T00:00+01:00 lies before year 1 in UTC
        return t.astimezone(timezone.utc)
    except OverflowError:
        raise _BadRequest(400, f"{name} is out of range: {raw!r}") from None


def _parse_int(raw: str, name: str, default: int) -> int:
    raw = raw.strip()
    if not raw:
        return default
    if not raw.isdigit() or len(raw) > 15:
        raise _BadRequest(400, f"{name} must be a non-negative integer, got {raw[:40]!r}")
    return int(raw)


class Dashboard:
    """What the routes read: the repository (through its provider) and the log opener."""

    def __init__(self, repo_provider: Any, log_access: LogAccess | None) -> None:
        if callable(repo_provider) and not hasattr(repo_provider, "list_jobs"):
            self._provider: RepoProvider = repo_provider
        else:
            self._provider = lambda: repo_provider
        self.log_access = log_access

    def repo(self) -> Any:
        return self._provider()

    def open_log(self, record: Any) -> BinaryIO:
        """The cycle's log opened through `log_access` (the caller closes it)."""
        raw = views.as_dict(record).get("log_path")
        if not raw:
            raise logview.LogUnavailable(404, "no log is recorded for this cycle")
        if self.log_access is None:
            raise logview.LogUnavailable(404, "this server does not serve log files")
        try:
            fd = self.log_access(str(raw))
        except Exception as exc:
            status = getattr(exc, "status", None)
            if not isinstance(status, int):
                raise
            raise logview.LogUnavailable(status, str(exc)) from None
        return os.fdopen(fd, "rb")

    def cycle_and_log(self, job_id: str, raw_cycle: str) -> tuple[int, Any, BinaryIO]:
        n = _parse_cycle(raw_cycle)
        record = self.repo().get_cycle(job_id, n)
        if record is None:
            raise _BadRequest(404, f"no cycle {n} of job {job_id!r} in the history")
        try:
            return n, record, self.open_log(record)
        except logview.LogUnavailable as exc:
            raise _BadRequest(exc.status, str(exc)) from None


_STATE_KEY = "relaunch_dashboard"


def _dashboard(request: Request) -> Dashboard:
    return getattr(request.state, _STATE_KEY)


DashDep = Annotated[Dashboard, Depends(_dashboard)]

# The routes, defined once; `create_router` binds them to a repository and log opener.
router = APIRouter(include_in_schema=False)
_ENV = _environment()


def create_router(repo_provider: Any, *, log_access: LogAccess | None = None) -> APIRouter:
    """The dashboard's routes over the repository that `repo_provider` gives.

    `log_access(path)` returns a read-only descriptor of a cycle's log (the router closes
    it) or raises an exception with a `status` (HTTP) attribute and a one-line message;
    the service passes its confined opener (`ServiceState.open_log`: inside the allowed
    roots, no symlink followed, regular files only). Without it, no log text is shown."""
    dashboard = Dashboard(repo_provider, log_access)

    def bind(request: Request) -> None:  # runs before each route's own dependencies
        setattr(request.state, _STATE_KEY, dashboard)

    bound = APIRouter(include_in_schema=False)
    for route in router.routes:  # copied flat: callers list `.routes` with their paths
        assert isinstance(route, APIRoute)
        bound.add_api_route(
            route.path,
            route.endpoint,
            methods=METHODS,
            response_class=route.response_class,
            dependencies=[Depends(bind)],
            include_in_schema=False,
        )
    return bound


def _render(
    request: Request,
    name: str,
    status: int = 200,
    *,
    live: bool = False,
    etag: str | None = None,
    **ctx: Any,
) -> HTMLResponse:
    ctx.update(
        root=request.scope.get("root_path", "").rstrip("/"),
        live_ms=LIVE_INTERVAL_MS if live else 0,
        request_path=request.url.path,
    )
    template = _ENV.get_template(name)
    if request.query_params.get("fragment") == "1":
        block = template.blocks["content"]
        html = "".join(block(template.new_context(ctx)))
    else:
        html = template.render(ctx)
    headers = {**SECURITY_HEADERS, "X-Relaunch-Live": str(ctx["live_ms"])}
    if etag is not None:
        headers.update(ETag=etag, **{"Cache-Control": "no-cache"})
    return HTMLResponse(html, status_code=status, headers=headers)


def _page_etag(request: Request, job: Any, live: bool) -> str:
    """A validator of a job page: every write to a job bumps its `updated_at`. (A running
    cycle's bar is drawn up to the time of the last change; a reload redraws it.)"""
    j = views.as_dict(job)
    fragment = request.query_params.get("fragment") == "1"
    key = f"{_BOOT}|{j.get('updated_at')}|{j.get('cycles')}|{j.get('state')}|{live}|{fragment}"
    return 'W/"' + hashlib.sha1(key.encode()).hexdigest()[:20] + '"'


def _not_modified(request: Request, etag: str, live: bool) -> Response | None:
    if request.headers.get("if-none-match") != etag:
        return None
    return Response(
        status_code=304,
        headers={
            "ETag": etag,
            "Cache-Control": "no-cache",
            "X-Relaunch-Live": str(LIVE_INTERVAL_MS if live else 0),
        },
    )


def _error_page(request: Request, status: int, message: str) -> HTMLResponse:
    return _render(request, "error.html", status, code=status, message=message)


def _guarded(fn: Callable[..., Response]) -> Callable[..., Response]:
    """Turn bad input and storage failures into an error page, never a traceback.

    FastAPI calls routes with keyword arguments only, `request` among them."""

    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> Response:
        try:
            return fn(**kwargs)
        except _BadRequest as exc:
            return _error_page(kwargs["request"], exc.status, str(exc))
        except ValueError as exc:  # the repository rejects malformed ids
            return _error_page(kwargs["request"], 400, str(exc))
        except Exception as exc:
            if type(exc).__name__ == "StorageError":
                return _error_page(kwargs["request"], 503, f"history database unavailable: {exc}")
            raise

    return wrapper


def _parse_cycle(raw: str) -> int:
    if not raw.isdigit() or len(raw) > 12:
        raise _BadRequest(400, f"cycle must be a non-negative integer, got {raw[:40]!r}")
    return int(raw)


@router.api_route("/", methods=METHODS, response_class=HTMLResponse)
@_guarded
def jobs_page(
    request: Request,
    dash: DashDep,
    state: str = "",
    job: str = "",
    failure_class: str = "",
    window: str = "",
    since: str = "",
    until: str = "",
) -> Response:
    state, job, failure_class = state.strip(), job.strip(), failure_class.strip()
    window = window.strip()
    if state and state not in JOB_STATES:
        raise _BadRequest(400, f"state must be one of {', '.join(JOB_STATES)}")
    if window and window not in WINDOWS and window != "all":
        raise _BadRequest(400, f"window must be one of {', '.join(WINDOWS)} or all")
    if len(job) > 255 or len(failure_class) > 128:
        raise _BadRequest(400, "filter term too long")
    t0, t1 = _parse_time(since, "since"), _parse_time(until, "until")
    if t0 is None and window in WINDOWS:
        t0 = datetime.now(timezone.utc) - timedelta(seconds=WINDOWS[window])
    if t0 and t1 and t0 > t1:
        raise _BadRequest(400, "since must not be later than until")
    repo = dash.repo()
    overviews = repo.job_overviews(
        state=state or None,
        job_query=job or None,
        failure_class=failure_class or None,
        since=t0,
        until=t1,
        limit=JOBS_LIMIT + 1,
    )
    jobs = [views.overview_row(o) for o in overviews]
    ckpts = dashboard_queries.newest_checkpoints(repo, [j["job_id"] for j in jobs[:JOBS_LIMIT]])
    now = datetime.now(timezone.utc)
    for j, o in zip(jobs, overviews, strict=False):
        end = o.get("ended_at") or (now if j["live"] else o.get("updated_at"))
        j["checkpoint"] = views.checkpoint_view(
            ckpts.get(j["job_id"]), until=end, running=j["live"]
        )
    counts = repo.job_state_counts(since=t0, until=t1)
    filtered = bool(state or job or failure_class or t0 or t1)
    return _render(
        request,
        "jobs.html",
        live=True,
        jobs=jobs[:JOBS_LIMIT],
        more_jobs=len(jobs) > JOBS_LIMIT,
        jobs_limit=JOBS_LIMIT,
        counts=counts,
        counted=[
            *views.COUNTED_STATES,
            *(k for k in counts if k not in views.COUNTED_STATES and k != "total" and counts[k]),
        ],
        classes=[]
        if request.query_params.get("fragment") == "1"  # the datalist is outside <main>
        else [f["failure_class"] for f in dashboard_queries.failure_classes(repo, FACETS)],
        states=JOB_STATES,
        windows=list(WINDOWS),
        f={
            "state": state,
            "job": job,
            "failure_class": failure_class,
            "window": window,
            "since": since.strip(),
            "until": until.strip(),
        },
        filtered=filtered,
        window_text=_window_text(window, t0, t1),
    )


# Job ids may contain '/': the `path` converter takes them whole, so the more specific
# routes are registered first.
_CYCLE = "/jobs/{job_id:path}/cycles/{cycle}"


@router.api_route(_CYCLE + "/audit.json", methods=METHODS)
@_guarded
def audit_json(request: Request, dash: DashDep, job_id: str, cycle: str) -> Response:
    n = _parse_cycle(cycle)
    record = dash.repo().get_cycle(job_id, n)
    if record is None:
        return JSONResponse(
            {"error": f"no cycle {n} of job {job_id!r} in the history"}, status_code=404
        )
    data = views.as_dict(record)
    path = data.get("audit_path")
    if (
        path
        and path.endswith(".json")
        and os.path.isfile(path)
        and os.path.getsize(path) <= MAX_AUDIT_BYTES
    ):
        return FileResponse(path, media_type="application/json")
    body = {
        "job_id": job_id,
        "cycle": n,
        "audit_path": path,
        "note": "no audit artifact on disk; this is the stored verdict record",
        "record": data,
    }
    return Response(
        json.dumps(body, indent=2, sort_keys=True, default=str),
        media_type="application/json",
    )


@router.api_route(_CYCLE + "/log/tail", methods=METHODS)
def log_tail(dash: DashDep, job_id: str, cycle: str, offset: str = "0") -> Response:
    try:
        off = _parse_int(offset, "offset", 0)
        n, record, fh = dash.cycle_and_log(job_id, cycle)
        with fh:
            data = logview.tail(fh, off)
    except _BadRequest as exc:
        return JSONResponse({"error": str(exc)}, status_code=exc.status)
    except ValueError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    except OSError as exc:
        return JSONResponse({"error": f"cannot read the log: {exc.strerror}"}, 404)
    except Exception as exc:
        if type(exc).__name__ == "StorageError":
            return JSONResponse({"error": f"history database unavailable: {exc}"}, 503)
        raise
    job = dash.repo().get_job(job_id)
    live = bool(job and views.job_row(job)["live"]) and (
        views.as_dict(record).get("status") == "registered"
    )
    data["live"] = live or bool(data.get("more"))
    return JSONResponse(data, headers={"Cache-Control": "no-store"})


@router.api_route(_CYCLE + "/log.txt", methods=METHODS)
@_guarded
def log_text(request: Request, dash: DashDep, job_id: str, cycle: str) -> Response:
    _, _, fh = dash.cycle_and_log(job_id, cycle)
    size = os.fstat(fh.fileno()).st_size  # what is there now; a growing log: tail it

    def chunks() -> Iterator[bytes]:
        with fh:
            left = size
            while left > 0:
                data = fh.read(min(left, 1 << 16))
                if not data:
                    return
                left -= len(data)
                yield data

    return StreamingResponse(
        chunks(),
        media_type="text/plain; charset=utf-8",
        headers={
            **SECURITY_HEADERS,
            "Cache-Control": "no-cache",
            "Content-Length": str(size),
        },
    )


@router.api_route(_CYCLE + "/log", methods=METHODS, response_class=HTMLResponse)
@_guarded
def log_page(request: Request, dash: DashDep, job_id: str, cycle: str) -> Response:
    n, record, fh = dash.cycle_and_log(job_id, cycle)
    fh.close()  # opened now: refused logs get their error before parameters are read
    q = request.query_params
    count = min(_parse_int(q.get("lines", ""), "lines", LOG_PAGE_LINES), 2000) or 1
    around = _parse_int(q.get("around", ""), "around", 0)
    start = _parse_int(q.get("start", ""), "start", max(1, around - count // 4) or 1)
    follow = q.get("follow") == "1"
    job = dash.repo().get_job(job_id)
    running = views.as_dict(record).get("status") == "registered"
    try:
        with dash.open_log(record) as fh:
            if follow:
                view = logview.last_lines(fh, count)
                view["more"] = False
                view["start"] = view["lines"][0][0] if view["lines"] else 1
            else:
                view = logview.page(fh, start, count)
    except logview.LogUnavailable as exc:
        raise _BadRequest(exc.status, str(exc)) from None
    except OSError as exc:
        raise _BadRequest(404, f"cannot read the log: {exc.strerror or exc}") from None
    return _render(
        request,
        "log.html",
        job={"job_id": job_id, **(views.job_row(job) if job else {})},
        cycle=n,
        log_path=views.as_dict(record).get("log_path"),
        view=view,
        count=count,
        around=around,
        follow=follow,
        running=running,
    )


@router.api_route(_CYCLE, methods=METHODS, response_class=HTMLResponse)
@_guarded
def cycle_page(request: Request, dash: DashDep, job_id: str, cycle: str) -> Response:
    n = _parse_cycle(cycle)
    repo = dash.repo()
    record = repo.get_cycle(job_id, n)
    if record is None:
        raise _BadRequest(404, f"no cycle {n} of job {job_id!r} in the history")
    job = repo.get_job(job_id)
    jrow = views.job_row(job) if job is not None else {"job_id": job_id, "live": False}
    detail = views.cycle_detail(record)
    detail["next_step"] = next_step(
        detail["decision"], detail["primary"], detail["status"], job_ended=not jrow["live"]
    )
    excerpt, log_error = None, None
    try:
        with dash.open_log(record) as fh:
            if detail["excerpt_at"] is not None:
                excerpt = logview.excerpt(fh, *detail["excerpt_at"])
    except logview.LogUnavailable as exc:
        log_error = str(exc)
    except OSError as exc:
        log_error = f"cannot read the log: {exc.strerror or exc}"
    live = bool(jrow["live"]) and (not detail["has_verdict"] or detail["llm"] is None)
    return _render(
        request,
        "cycle.html",
        live=live,
        job=jrow,
        c=detail,
        excerpt=excerpt,
        log_error=log_error,
    )


@router.api_route("/jobs/{job_id:path}", methods=METHODS, response_class=HTMLResponse)
@_guarded
def job_page(request: Request, dash: DashDep, job_id: str) -> Response:
    repo = dash.repo()
    job = repo.get_job(job_id)
    if job is None:
        raise _BadRequest(404, f"no job {job_id!r} in the history")
    jrow = views.job_row(job)
    etag = _page_etag(request, job, jrow["live"])
    unchanged = _not_modified(request, etag, jrow["live"])
    if unchanged is not None:  # live refresh of an unchanged job: skip the timeline query
        return unchanged
    rows = [views.cycle_row(c) for c in dashboard_queries.timeline(repo, job_id, TIMELINE_LIMIT)]
    if not jrow["live"]:  # a finished job runs nothing: a cycle it registered never ran
        for r in rows:
            if r["running"]:
                r["running"], r["cause"] = False, "never analysed (the job had ended)"
    now = datetime.now(timezone.utc)
    deciding = (repo.deciding_verdicts([job_id]).get(job_id) or {}).get("deciding")
    running = jrow["live"] and any(r["running"] for r in rows)
    ends = [r["ended_at"] for r in rows if r["ended_at"] is not None]
    checkpoint = views.checkpoint_view(
        dashboard_queries.newest_checkpoints(repo, [job_id]).get(job_id),
        until=now if running else max(ends, default=None),
        running=running,
    )
    return _render(
        request,
        "job.html",
        live=jrow["live"],
        etag=etag,
        job=jrow,
        cycles=rows,
        deciding=deciding,
        checkpoint=checkpoint,
        timeline=charts.cycle_timeline(rows, now),
        goodput=charts.goodput(rows, now),
        iterations=charts.iterations_chart(rows, now),
        strip=charts.failure_strip(rows),
        notes=dashboard_queries.node_health_notes(repo, job_id, NODE_NOTES),
        shown_limit=TIMELINE_LIMIT if jrow["cycles"] > len(rows) else None,
    )


@router.api_route("/search", methods=METHODS, response_class=HTMLResponse)
@_guarded
def search_page(
    request: Request,
    dash: DashDep,
    fingerprint: str = "",
    failure_class: str = "",
    decision: str = "",
) -> Response:
    fingerprint, failure_class = fingerprint.strip(), failure_class.strip()
    decision = decision.strip().upper()
    if decision and decision not in tuple(Decision):
        raise _BadRequest(400, "decision must be STOP or RESTART")
    if len(fingerprint) > 4096 or len(failure_class) > 128:
        raise _BadRequest(400, "search term too long")
    searched = bool(fingerprint or failure_class or decision)
    results: list[dict[str, Any]] = []
    facets: list[dict[str, Any]] = []
    recurring: list[dict[str, Any]] = []
    repo = dash.repo()
    if not searched:
        facets = dashboard_queries.failure_classes(repo, FACETS)
        recurring = dashboard_queries.recurring_fingerprints(repo, FACETS)
    else:
        records = repo.search(
            fingerprint=fingerprint or None,
            failure_class=failure_class or None,
            decision=decision or None,
            limit=SEARCH_LIMIT,
        )
        for r in records:
            d = views.as_dict(r)
            row = views.cycle_row(d)
            row["job_id"] = d.get("job_id")
            row["analysed"] = views.fmt_time(d.get("analysed_at"))
            results.append(row)
    return _render(
        request,
        "search.html",
        searched=searched,
        results=results,
        facets=facets,
        recurring=recurring,
        limit=SEARCH_LIMIT,
        fingerprint=fingerprint,
        failure_class=failure_class,
        decision=decision,
    )


@router.api_route("/static/{name}", methods=METHODS)
def static_file(name: str) -> Response:
    path = STATIC / name
    if "/" in name or name.startswith(".") or path.suffix not in STATIC_TYPES or not path.is_file():
        return JSONResponse({"error": "not found"}, status_code=404)
    return FileResponse(
        path,
        media_type=STATIC_TYPES[path.suffix],
        headers={"Cache-Control": "max-age=300", **SECURITY_HEADERS},
    )
