"""The one error → HTTP table (STYLE §9); the client holds its inverse.

Bodies are ``{"error": {"code", "message", "details"}}``: never a traceback, never a secret
(every message and detail passes :func:`gpupool.data.redaction.redact` on its way out: a
rejected value may be a signed URL or a token).
Unexpected exceptions are logged server-side and answered with a generic 500.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpupool.core.errors import (
    ConfigInvalid,
    Conflict,
    Forbidden,
    GpupoolError,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    TooManyRequests,
    Unauthenticated,
    Unavailable,
)
from gpupool.data.redaction import redact, redact_obj
from gpupool.server.services.submit_checks import describe_validation_error

log = logging.getLogger(__name__)

STATUS_BY_ERROR: dict[type[GpupoolError], int] = {
    InvalidRequest: 422,
    ConfigInvalid: 422,
    Unauthenticated: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    PayloadTooLarge: 413,
    TooManyRequests: 429,
    Unavailable: 503,
}

_CODE_BY_STATUS = {
    400: "invalid_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    422: "invalid_request",
    429: "too_many_requests",
}


def error_response(status: int, code: str, message: str, details: object = None) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(
        {"error": {"code": code, "message": redact(message), "details": redact_obj(details)}},
        status_code=status,
        headers=headers,
    )


def install(app: FastAPI) -> None:
    @app.exception_handler(GpupoolError)
    async def _domain(_: Request, exc: GpupoolError) -> JSONResponse:
        return error_response(
            STATUS_BY_ERROR.get(type(exc), 500), exc.code, exc.message, exc.details
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        details = [describe_validation_error(e) for e in exc.errors()]
        fields = ", ".join(d["field"] for d in details)
        return error_response(422, "invalid_request", f"invalid request: {fields}", details)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _CODE_BY_STATUS.get(exc.status_code, "error")
        return error_response(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error(
            "unhandled error on %s %s: %s",
            request.method,
            request.url.path,
            type(exc).__name__,
            exc_info=exc,
        )
        return error_response(500, "internal", "internal server error; see the server log")
