"""Domain errors with stable codes.

Every error the server can return maps from one of these classes (see
``gpupool.server.errors``); the client maps the codes back (``gpupool.client.errors``).
Messages must never contain a secret: they end up in HTTP bodies and logs.
"""

from __future__ import annotations

from typing import Any


class GpupoolError(Exception):
    """Base class: ``code`` is stable and machine-readable, ``message`` is for people."""

    code = "internal"

    def __init__(self, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class InvalidRequest(GpupoolError):
    code = "invalid_request"


class Unauthenticated(GpupoolError):
    code = "unauthenticated"


class Forbidden(GpupoolError):
    code = "forbidden"


class NotFound(GpupoolError):
    code = "not_found"


class Conflict(GpupoolError):
    code = "conflict"


class ConfigInvalid(GpupoolError):
    """The cluster configuration has problems; ``details`` lists every one."""

    code = "config_invalid"


class Unavailable(GpupoolError):
    """A dependency (a backend, the store) cannot serve the request now; retry later."""

    code = "unavailable"


class StoreUnavailable(Unavailable):
    """The database cannot be reached now (lost connection, restart, no free connection):
    the API answers 503 with ``Retry-After``, the controller pauses until it is back."""


class PayloadTooLarge(GpupoolError):
    """A request body is larger than the server accepts; the message names the limit."""

    code = "payload_too_large"


class TooManyRequests(GpupoolError):
    """A per-user bound is reached (e.g. concurrent log streams); retry when one ends."""

    code = "too_many_requests"
