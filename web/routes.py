"""The dashboard router: server-rendered HTML pages over the history repository.

`create_router(repo_provider)` returns a FastAPI `APIRouter` that the service mounts at
`/`. `repo_provider` is a `storage.HistoryRepository` or a zero-argument callable that
returns one (so the service can open the database lazily or swap it in tests).

Pages (all readable without JavaScript; `static/live.js` refreshes them while a job runs
by fetching the same URL with `?fragment=1`, which returns only the page's content):

- `/` jobs with state and last verdict, and the search form;
- `/jobs/{job}` the cycle timeline and the progress plot (inline SVG);
- `/jobs/{job}/cycles/{n}` verdict, primary evidence, folded cascades, fingerprint, rule,
  budgets, FR findings, LLM explanation, and `/jobs/{job}/cycles/{n}/audit.json`;
- `/search?fingerprint=&failure_class=&decision=` history search;
- `/static/{name}` the stylesheet and script.

Everything printed is escaped by Jinja2 autoescaping (log text is untrusted), and every
page carries a Content-Security-Policy that allows only the dashboard's own script.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from storage import dashboard_queries
from web import views

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
JOBS_LIMIT = 500  # most recently updated jobs listed on /
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


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def create_router(repo_provider: Any) -> APIRouter:
    """The dashboard's routes over the repository that `repo_provider` gives."""
    if callable(repo_provider) and not hasattr(repo_provider, "list_jobs"):
        get_repo: RepoProvider = repo_provider
    else:

        def get_repo() -> Any:
            return repo_provider

    env = _environment()
    router = APIRouter(include_in_schema=False)

    def render(
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
        template = env.get_template(name)
        if request.query_params.get("fragment") == "1":
            block = template.blocks["content"]
            html = "".join(block(template.new_context(ctx)))
        else:
            html = template.render(ctx)
        headers = {**SECURITY_HEADERS, "X-Relaunch-Live": str(ctx["live_ms"])}
        if etag is not None:
            headers.update(ETag=etag, **{"Cache-Control": "no-cache"})
        return HTMLResponse(html, status_code=status, headers=headers)

    def page_etag(request: Request, job: Any, live: bool) -> str:
        """A validator of a job page: every write to a job bumps its `updated_at`."""
        j = views.as_dict(job)
        fragment = request.query_params.get("fragment") == "1"
        key = f"{_BOOT}|{j.get('updated_at')}|{j.get('cycles')}|{j.get('state')}|{live}|{fragment}"
        return 'W/"' + hashlib.sha1(key.encode()).hexdigest()[:20] + '"'

    def not_modified(request: Request, etag: str, live: bool) -> Response | None:
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

    def error_page(request: Request, status: int, message: str) -> HTMLResponse:
        return render(request, "error.html", status, code=status, message=message)

    def guarded(fn: Callable[..., Response]) -> Callable[..., Response]:
        """Turn bad input and storage failures into an error page, never a traceback."""

        def wrapper(request: Request, *args: Any, **kwargs: Any) -> Response:
            try:
                return fn(request, *args, **kwargs)
            except _BadRequest as exc:
                return error_page(request, exc.status, str(exc))
            except ValueError as exc:  # the repository rejects malformed ids
                return error_page(request, 400, str(exc))
            except Exception as exc:
                if type(exc).__name__ == "StorageError":
                    return error_page(request, 503, f"history database unavailable: {exc}")
                raise

        return wrapper

    def parse_cycle(raw: str) -> int:
        if not raw.isdigit() or len(raw) > 12:
            raise _BadRequest(400, f"cycle must be a non-negative integer, got {raw[:40]!r}")
        return int(raw)

    @router.get("/", response_class=HTMLResponse)
    def jobs_page(request: Request) -> Response:
        return guarded(_jobs_page)(request)

    def _jobs_page(request: Request) -> Response:
        jobs = [views.job_row(j) for j in get_repo().list_jobs(limit=JOBS_LIMIT + 1)]
        return render(
            request,
            "jobs.html",
            live=True,
            jobs=jobs[:JOBS_LIMIT],
            more_jobs=len(jobs) > JOBS_LIMIT,
            jobs_limit=JOBS_LIMIT,
            fingerprint="",
            failure_class="",
        )

    def job_page(request: Request, job_id: str) -> Response:
        return guarded(_job_page)(request, job_id)

    def _job_page(request: Request, job_id: str) -> Response:
        repo = get_repo()
        job = repo.get_job(job_id)
        if job is None:
            raise _BadRequest(404, f"no job {job_id!r} in the history")
        jrow = views.job_row(job)
        etag = page_etag(request, job, jrow["live"])
        unchanged = not_modified(request, etag, jrow["live"])
        if unchanged is not None:  # live refresh of an unchanged job: skip the timeline query
            return unchanged
        rows = [
            views.cycle_row(c) for c in dashboard_queries.timeline(repo, job_id, TIMELINE_LIMIT)
        ]
        plot = views.progress_plot(rows)
        return render(
            request,
            "job.html",
            live=jrow["live"],
            etag=etag,
            job=jrow,
            cycles=rows,
            plot=plot,
            shown_limit=TIMELINE_LIMIT if jrow["cycles"] > len(rows) else None,
        )

    def cycle_page(request: Request, job_id: str, cycle: str) -> Response:
        return guarded(_cycle_page)(request, job_id, cycle)

    def _cycle_page(request: Request, job_id: str, raw_cycle: str) -> Response:
        n = parse_cycle(raw_cycle)
        repo = get_repo()
        record = repo.get_cycle(job_id, n)
        if record is None:
            raise _BadRequest(404, f"no cycle {n} of job {job_id!r} in the history")
        job = repo.get_job(job_id)
        jrow = views.job_row(job) if job is not None else {"job_id": job_id, "live": False}
        detail = views.cycle_detail(record)
        live = jrow["live"] and (not detail["has_verdict"] or detail["llm"] is None)
        return render(request, "cycle.html", live=live, job=jrow, c=detail)

    def audit_json(request: Request, job_id: str, cycle: str) -> Response:
        return guarded(_audit_json)(request, job_id, cycle)

    def _audit_json(request: Request, job_id: str, raw_cycle: str) -> Response:
        n = parse_cycle(raw_cycle)
        record = get_repo().get_cycle(job_id, n)
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

    # Job ids may contain '/': the `path` converter takes them whole, so the more specific
    # routes go first.
    router.add_api_route("/jobs/{job_id:path}/cycles/{cycle}/audit.json", audit_json)
    router.add_api_route(
        "/jobs/{job_id:path}/cycles/{cycle}", cycle_page, response_class=HTMLResponse
    )
    router.add_api_route("/jobs/{job_id:path}", job_page, response_class=HTMLResponse)

    @router.get("/search", response_class=HTMLResponse)
    def search_page(
        request: Request,
        fingerprint: str = "",
        failure_class: str = "",
        decision: str = "",
    ) -> Response:
        return guarded(_search_page)(request, fingerprint, failure_class, decision)

    def _search_page(
        request: Request, fingerprint: str, failure_class: str, decision: str
    ) -> Response:
        fingerprint, failure_class = fingerprint.strip(), failure_class.strip()
        decision = decision.strip().upper()
        if decision and decision not in ("STOP", "RESTART"):
            raise _BadRequest(400, "decision must be STOP or RESTART")
        if len(fingerprint) > 4096 or len(failure_class) > 128:
            raise _BadRequest(400, "search term too long")
        searched = bool(fingerprint or failure_class or decision)
        results: list[dict[str, Any]] = []
        facets: list[dict[str, Any]] = []
        recurring: list[dict[str, Any]] = []
        if not searched:
            facets = dashboard_queries.failure_classes(get_repo(), FACETS)
            recurring = dashboard_queries.recurring_fingerprints(get_repo(), FACETS)
        else:
            records = get_repo().search(
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
        return render(
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

    @router.get("/static/{name}")
    def static_file(name: str) -> Response:
        path = STATIC / name
        if (
            "/" in name
            or name.startswith(".")
            or path.suffix not in STATIC_TYPES
            or not path.is_file()
        ):
            return JSONResponse({"error": "not found"}, status_code=404)
        return FileResponse(
            path,
            media_type=STATIC_TYPES[path.suffix],
            headers={"Cache-Control": "max-age=300", **SECURITY_HEADERS},
        )

    return router
