"""The FastAPI application factory: `create_app(settings) -> FastAPI`.

Also here: the API docs served without a CDN (`/docs` Swagger UI, `/redoc` ReDoc, their
assets from the `fastapi-offline` package under `/docs-assets/`), HEAD answered on every
GET route (`HeadAsGet`), and the dashboard's access to cycle logs through the service's
confined opener (`ServiceState.open_log`, attribution/service/confined.py).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from relaunch.attribution.service import routes_end, routes_nodes, routes_nvrx, routes_v1
from relaunch.attribution.service.errors import install_handlers
from relaunch.attribution.service.guards import default_allowed_hosts
from relaunch.attribution.service.limits import LimitsMiddleware
from relaunch.attribution.service.settings import ServiceSettings
from relaunch.attribution.service.state import ServiceState

log = logging.getLogger(__name__)

API_VERSION = "1"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("relaunch")
    except ImportError:  # no metadata (PackageNotFoundError is one)
        return "0.1.0"


def create_app(settings: ServiceSettings | None = None) -> FastAPI:
    """Build the service. The state (database, pool, listeners) opens here, so a bad
    database URL fails before the server binds its socket."""
    settings = settings or ServiceSettings()
    state = ServiceState(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await state.start()
        try:
            yield
        finally:
            await state.stop()

    app = FastAPI(
        title="relaunch attribution service",
        version=_version(),
        summary="STOP/RESTART verdicts for failed training cycles, with persistent history",
        lifespan=lifespan,
        docs_url=None,  # served below from local assets: no CDN at view time
        redoc_url=None,
    )
    _mount_docs(app)
    app.state.service = state
    install_handlers(app)
    app.include_router(routes_nvrx.router)
    app.include_router(routes_v1.router)
    app.include_router(routes_end.router)
    app.include_router(routes_nodes.router)
    if settings.dashboard:
        _mount_dashboard(app, state)
    app.add_middleware(HeadAsGet)  # inside LimitsMiddleware: auth and limits see HEAD
    app.add_middleware(
        LimitsMiddleware,
        token=settings.token,
        rate=settings.rate_limit_per_s,
        burst=settings.rate_limit_burst,
        max_body=settings.max_body_bytes,
        max_upload=settings.max_upload_bytes,
        dashboard_public=settings.dashboard_public,
        allowed_hosts=default_allowed_hosts(settings.bind_host, settings.allowed_hosts),
        body_timeout=settings.body_timeout_s,
    )
    return app


def _mount_dashboard(app: FastAPI, state: ServiceState) -> None:
    try:
        from relaunch.web.routes import create_router
    except ImportError:
        log.info("dashboard not available (web.routes missing); API only")
        return
    # logs are read through the service's confined opener (allowed roots and uploads, no
    # symlink followed, regular files only), as every other read of a client-named file
    app.include_router(create_router(lambda: state.repo, log_access=state.open_log))


DOCS_ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "redoc.standalone.js": "text/javascript",
    "favicon.png": "image/png",
}


def _docs_assets_dir() -> Path | None:
    try:
        import fastapi_offline
    except ImportError:
        return None
    return Path(fastapi_offline.__file__).resolve().parent / "static"


def _mount_docs(app: FastAPI) -> None:
    """`/docs` and `/redoc` with Swagger UI / ReDoc from the installed `fastapi-offline`
    package (served at `/docs-assets/NAME`), so the docs work on machines without internet."""
    assets = _docs_assets_dir()
    title = app.title

    def page(request: Request, render: Callable[[str, str], Response]) -> Response:
        """`render(openapi_url, assets_url)`, both under this server's root path."""
        if assets is None:
            return _no_docs_assets()
        root = request.scope.get("root_path", "").rstrip("/")
        return render(root + (app.openapi_url or "/openapi.json"), f"{root}/docs-assets")

    @app.get("/docs", include_in_schema=False)
    def swagger(request: Request) -> Response:
        return page(
            request,
            lambda spec, at: get_swagger_ui_html(
                openapi_url=spec,
                title=f"{title} · API docs",
                swagger_js_url=f"{at}/swagger-ui-bundle.js",
                swagger_css_url=f"{at}/swagger-ui.css",
                swagger_favicon_url=f"{at}/favicon.png",
            ),
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> Response:
        return page(
            request,
            lambda spec, at: get_redoc_html(
                openapi_url=spec,
                title=f"{title} · API reference",
                redoc_js_url=f"{at}/redoc.standalone.js",
                redoc_favicon_url=f"{at}/favicon.png",
                with_google_fonts=False,
            ),
        )

    @app.get("/docs-assets/{name}", include_in_schema=False)
    def docs_asset(name: str) -> Response:
        if assets is None or name not in DOCS_ASSETS:  # by exact name: no paths
            return JSONResponse({"error_code": "not_found", "message": "no such asset"}, 404)
        return FileResponse(
            assets / name,
            media_type=DOCS_ASSETS[name],
            headers={"Cache-Control": "max-age=86400"},
        )


def _no_docs_assets() -> HTMLResponse:
    return HTMLResponse(
        "<!doctype html><title>API docs unavailable</title><p>The API docs need the "
        "<code>fastapi-offline</code> package (pip install fastapi-offline); the OpenAPI "
        'document is at <a href="openapi.json">/openapi.json</a>.</p>',
        status_code=503,
    )


class HeadAsGet:
    """Answer HEAD on every GET route: the request is routed as GET and the body dropped
    (the headers, Content-Length included, are those GET would send)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def send_headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                if not message.get("more_body", False):
                    await send({"type": "http.response.body", "body": b""})
                return
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, send_headers_only)
