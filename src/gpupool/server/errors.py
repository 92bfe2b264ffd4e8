"""The one error → HTTP table (docs/code-style.md §9); the client holds its inverse.

Bodies are ``{"error": {"code", "message", "details"}}``: never a traceback, never a secret
(every message and detail passes :func:`gpupool.data.redaction.redact` on its way out: a
rejected value may be a signed URL or a token).
Unexpected exceptions are logged server-side and answered with a generic 500.

A store that cannot be reached (``gpupool.state.db.store_outage``: a lost connection, a
PostgreSQL restart) is not a bug: it is answered 503 ``unavailable`` with ``Retry-After``,
logged without a traceback and at most once per ``OUTAGE_LOG_EVERY_S``. Every 503 carries
``Retry-After`` so clients and proxies know when to try again.
"""

from __future__ import annotations

import logging
import threading
import time

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
    StoreUnavailable,
    TooManyRequests,
    Unauthenticated,
    Unavailable,
)
from gpupool.data.redaction import redact, redact_obj
from gpupool.server.services.submit_checks import describe_validation_error
from gpupool.state.db import StoreError, store_outage

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
    StoreUnavailable: 503,
}

RETRY_AFTER_S = 2  # what a 503 asks clients to wait; a PostgreSQL restart takes seconds
OUTAGE_LOG_EVERY_S = 10.0

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
    headers = None
    if status == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    elif status == 503:
        headers = {"Retry-After": str(RETRY_AFTER_S)}
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

    @app.exception_handler(StoreUnavailable)
    @app.exception_handler(StoreError)
    async def _store(request: Request, exc: Exception) -> JSONResponse:
        outage = store_outage(exc)
        if outage is None:  # not an outage but a bug: on to the 500 handler, as before
            raise exc
        if _outage_log.due():
            log.warning(
                "answering 503 while the store is unreachable (%s %s): %s",
                request.method,
                request.url.path,
                outage.message,
            )
        return error_response(
            503,
            outage.code,
            f"the database is unavailable; retry in {RETRY_AFTER_S} s",
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
        return _internal(request, exc)


def _internal(request: Request, exc: Exception) -> JSONResponse:
    log.error(
        "unhandled error on %s %s: %s",
        request.method,
        request.url.path,
        type(exc).__name__,
        exc_info=exc,
    )
    return error_response(500, "internal", "internal server error; see the server log")


class _Every:
    """True at most once per ``seconds`` (thread-safe): one log line per outage window,
    not one per refused request."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._last = float("-inf")
        self._lock = threading.Lock()

    def due(self) -> bool:
        now = time.monotonic()
        with self._lock:
            if now - self._last < self.seconds:
                return False
            self._last = now
            return True


_outage_log = _Every(OUTAGE_LOG_EVERY_S)
