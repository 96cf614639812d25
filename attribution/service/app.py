"""The FastAPI application factory: `create_app(settings) -> FastAPI`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from attribution.service import routes_nvrx, routes_v1
from attribution.service.errors import install_handlers
from attribution.service.limits import LimitsMiddleware
from attribution.service.settings import ServiceSettings
from attribution.service.state import ServiceState

log = logging.getLogger(__name__)

API_VERSION = "1"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("relaunch")
    except Exception:
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
    )
    app.state.service = state
    install_handlers(app)
    app.include_router(routes_nvrx.router)
    app.include_router(routes_v1.router)
    if settings.dashboard:
        _mount_dashboard(app, state)
    app.add_middleware(
        LimitsMiddleware,
        token=settings.token,
        rate=settings.rate_limit_per_s,
        burst=settings.rate_limit_burst,
        max_body=settings.max_body_bytes,
        max_upload=settings.max_upload_bytes,
        dashboard_public=settings.dashboard_public,
    )
    return app


def _mount_dashboard(app: FastAPI, state: ServiceState) -> None:
    try:
        from web.routes import create_router
    except ImportError:
        log.info("dashboard not available (web.routes missing); API only")
        return
    app.include_router(create_router(lambda: state.repo))
