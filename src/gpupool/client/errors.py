"""Typed exceptions for API errors: the inverse of the server's error→HTTP table
(docs/code-style.md §9).

Every non-2xx answer carries ``{"error": {"code", "message", "details"}}``. ``raise_for_response``
turns it back into the exception class registered for ``code`` in ``ERRORS_BY_CODE``. When the
body is not ours (a proxy's 502 page, an empty 404 from a wrong URL) the HTTP status picks the
class instead, so callers can always catch by class.

Transport failures become ``ConnectionFailed`` (``map_transport_errors``), whose message names the
server URL and how to fix it. No message here ever includes the token: exceptions carry only what
the server said, the URL (with any userinfo stripped) and the transport's own error text.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from gpupool.client.settings import ENV_URL


class GpupoolError(Exception):
    """Base class. ``code`` is the server's stable error code; ``status`` the HTTP status."""

    code = "internal"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        details: Any = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details
        self.status = status

    def __str__(self) -> str:
        """The message and, for a refused request, each named field with why it was refused
        (so ``print(exc)`` or a traceback says what to fix, not only that something was)."""
        details = self.details if isinstance(self.details, list) else []
        fields = [
            f"{d['field']}: {d['message']}"
            for d in details
            if isinstance(d, dict) and d.get("field") and d.get("message")
        ]
        return f"{self.message} ({'; '.join(fields)})" if fields else self.message

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(code={self.code!r}, status={self.status!r}, message={self.message!r})"


class InvalidRequest(GpupoolError):
    """The request was malformed or violates a rule; ``details`` names the fields."""

    code = "invalid_request"


class ConfigInvalid(InvalidRequest):
    """A cluster configuration was rejected; ``details`` lists every problem."""

    code = "config_invalid"


class PayloadTooLarge(InvalidRequest):
    """The request body was larger than the server accepts (HTTP 413); the message names
    the limit."""

    code = "payload_too_large"


class TooManyRequests(GpupoolError):
    """A per-user bound was reached (HTTP 429), e.g. concurrent log streams; retry later."""

    code = "too_many_requests"


class Unauthenticated(GpupoolError):
    code = "unauthenticated"


class Forbidden(GpupoolError):
    code = "forbidden"


class NotFound(GpupoolError):
    code = "not_found"


class Conflict(GpupoolError):
    code = "conflict"


class ServerError(GpupoolError):
    code = "internal"


class Unavailable(ServerError):
    """The server cannot serve the request now (HTTP 503), e.g. its database is restarting:
    nothing was done, so the same request may be sent again. ``retry_after``: the seconds
    the server asked to wait (its ``Retry-After``), or None."""

    code = "unavailable"
    retry_after: float | None = None

    def __str__(self) -> str:
        wait = f"in {self.retry_after:g} s" if self.retry_after is not None else "shortly"
        return f"{self.message} (the server is temporarily unavailable: retry {wait})"


class ConnectionFailed(GpupoolError):
    """The server could not be reached (or the connection broke mid-request)."""

    code = "connection_failed"


# The inverse of the server's table: error code -> exception class.
ERRORS_BY_CODE: dict[str, type[GpupoolError]] = {
    "invalid_request": InvalidRequest,
    "config_invalid": ConfigInvalid,
    "unauthenticated": Unauthenticated,
    "forbidden": Forbidden,
    "not_found": NotFound,
    "conflict": Conflict,
    "payload_too_large": PayloadTooLarge,
    "too_many_requests": TooManyRequests,
    "unavailable": Unavailable,
    "internal": ServerError,
}

# Used only when the body has no (known) code, e.g. an error page from a proxy.
_ERRORS_BY_STATUS: dict[int, type[GpupoolError]] = {
    400: InvalidRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: InvalidRequest,
    429: TooManyRequests,
    503: Unavailable,
}


def error_for(status: int, body: Any) -> GpupoolError:
    """Build the exception for an error answer with HTTP ``status`` and decoded JSON ``body``."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        code = error["code"]
        message = str(error.get("message") or code)
        cls = ERRORS_BY_CODE.get(code) or _class_for_status(status)
        return cls(message, code=code, details=error.get("details"), status=status)
    cls = _class_for_status(status)
    return cls(f"server answered HTTP {status} without an error body", status=status)


def raise_for_response(response: httpx.Response) -> None:
    """Raise the typed exception for a non-2xx ``response``; return quietly otherwise.

    The body must already be read (streaming callers call ``read()``/``aread()`` first).
    """
    if response.is_success:
        return
    try:
        body = response.json()
    except ValueError:
        body = None
    error = error_for(response.status_code, body)
    if isinstance(error, Unavailable):
        error.retry_after = retry_after(response)
    raise error


def _class_for_status(status: int) -> type[GpupoolError]:
    if status >= 500 and status != 503:
        return ServerError
    return _ERRORS_BY_STATUS.get(status, GpupoolError)


def retry_after(response: httpx.Response) -> float | None:
    """The ``Retry-After`` header in seconds (the delay form; an HTTP date is ignored)."""
    try:
        seconds = float(response.headers.get("Retry-After", ""))
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def display_url(url: str) -> str:
    """``url`` without userinfo, safe to put in a message."""
    parsed = httpx.URL(url)
    return str(parsed.copy_with(username=None, password=None)) if parsed.userinfo else url


@contextmanager
def map_transport_errors(url: str) -> Iterator[None]:
    """Translate httpx transport failures into ``ConnectionFailed`` (docs/code-style.md §8)."""
    try:
        yield
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        reason = str(exc) or type(exc).__name__
        raise ConnectionFailed(
            f"cannot reach the gpupool server at {display_url(url)} ({reason});"
            f" start it with `gpupool server` or set {ENV_URL} (or --url)"
        ) from exc
    except httpx.TransportError as exc:
        raise ConnectionFailed(
            f"lost the connection to the gpupool server at {display_url(url)}"
            f" ({type(exc).__name__}: {exc})"
        ) from exc
