"""The service's one error model: every 4xx/5xx is `{"error_code": str, "message": str}`.

NVRx attrsvc clients parse exactly this shape; the codes below are the stable set.
"""

from __future__ import annotations

import errno
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

log = logging.getLogger(__name__)

# error_code -> HTTP status (documented in docs/service.md)
ERROR_STATUS: dict[str, int] = {
    "invalid_parameter": 400,
    "invalid_path": 400,
    "not_regular_file": 400,
    "unauthorized": 401,
    "outside_allowed_root": 403,
    "cross_site_refused": 403,
    "unreadable": 403,
    "not_found": 404,
    "not_submitted": 404,
    "method_not_allowed": 405,
    "request_timeout": 408,
    "conflict": 409,  # a different log for a stored cycle, or a node's log at another path
    "cycle_being_analysed": 409,
    "payload_too_large": 413,
    "host_not_allowed": 421,
    "malformed_request": 422,
    "rate_limited": 429,
    "internal_error": 500,
    "overloaded": 503,
    "storage_unavailable": 503,
}


class ErrorBody(BaseModel):
    """Shape of every error response (used in the OpenAPI document)."""

    error_code: str
    message: str


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (400, 401, 403, 404, 408, 409, 413, 421, 422, 429, 503)
}


class ApiError(Exception):
    """Raise anywhere in a request to answer with the error model."""

    def __init__(self, error_code: str, message: str, *, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.error_code = error_code
        self.message = message
        self.status = ERROR_STATUS[error_code]
        self.headers = headers or {}


def error_response(
    error_code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error_code": error_code, "message": message},
        status_code=ERROR_STATUS[error_code],
        headers=headers,
    )


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(x) for x in err.get("loc", ()) if x not in ("body", "query", "path"))
        parts.append(f"{loc or 'body'}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "malformed request"


STRUCTURAL_ERRORS = frozenset({"json_invalid", "missing", "model_attributes_type", "dict_type"})


def validation_code(exc: RequestValidationError) -> str:
    """422 for a body that is not the expected JSON object (unparseable, not an object, a
    required field missing); 400 for a field or query parameter with a bad value."""
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        if loc and loc[0] == "body" and (len(loc) == 1 or err.get("type") in STRUCTURAL_ERRORS):
            return "malformed_request"
    return "invalid_parameter"


def install_handlers(app: FastAPI) -> None:
    """Map every exception a request can raise onto the error model."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.error_code, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(validation_code(exc), _validation_message(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, ApiError):  # raised while the body was read (size limit)
            return error_response(cause.error_code, cause.message, cause.headers)
        if exc.status_code == 400:  # the framework could not parse the body
            return error_response("malformed_request", f"malformed request body: {exc.detail}")
        code = {
            404: "not_found",
            405: "method_not_allowed",
            401: "unauthorized",
            413: "payload_too_large",
        }.get(exc.status_code)
        if code is None:
            code = "invalid_parameter" if exc.status_code < 500 else "internal_error"
            return JSONResponse(
                {"error_code": code, "message": str(exc.detail)}, status_code=exc.status_code
            )
        return error_response(code, str(exc.detail))

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, exc: ClientDisconnect) -> JSONResponse:
        # the client left mid-body: nobody reads this answer, and it is no server error
        return error_response("invalid_parameter", "the client left before the body ended")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        storage = storage_refusal(exc)
        if storage is not None:  # the database cannot keep writes: loud, retryable, no 500
            log.warning("%s %s: %s", request.method, request.url.path, storage.message)
            return error_response(storage.error_code, storage.message, storage.headers)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EROFS, errno.EDQUOT):
            return error_response(
                "storage_unavailable",
                f"the service cannot write: {exc.strerror}",
                {"Retry-After": "30"},
            )
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response("internal_error", f"internal error: {type(exc).__name__}")


def storage_refusal(exc: BaseException | None) -> ApiError | None:
    """The 503 for an exception that says the database cannot keep writes, else None."""
    from relaunch.storage.db import StorageUnavailable

    while exc is not None:
        if isinstance(exc, StorageUnavailable):
            return ApiError("storage_unavailable", str(exc), headers={"Retry-After": "30"})
        exc = exc.__cause__ or exc.__context__
    return None
