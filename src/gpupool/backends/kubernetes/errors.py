"""Translate what the ``kubernetes`` client raises into backend errors (docs/code-style.md §8).

The client raises ``kubernetes.client.exceptions.ApiException`` (``status``, ``reason`` and the
API server's ``Status`` object as JSON ``body``) for every non-2xx answer, urllib3 errors
(``MaxRetryError``, ``NewConnectionError``, ``ProtocolError``, timeouts) when the API server
cannot be reached, ``ConfigException`` for a kubeconfig it cannot use, and ``ApiValueError`` /
``ApiTypeError`` for arguments it refuses before sending anything. The classes are recognised
by name, so this module (and its tests) import neither the client nor urllib3.

=========================================  ======================  ==========================
raised                                      gpupool error           why
=========================================  ======================  ==========================
HTTP 408, 429, 5xx, 409 Conflict, 410       BackendUnavailable      transient: retry the call
HTTP 403 "exceeded quota"                  BackendUnavailable      frees up as jobs end
HTTP 401, other 403 (RBAC)                 BackendMisconfigured    credentials or RBAC
HTTP 404 (namespace or API missing)        BackendMisconfigured    export not applied
other 4xx (400, 422: the Job is invalid)   ``invalid``             the attempt's fault
urllib3 errors, ``OSError``, timeouts      BackendUnavailable      unreachable
... whose cause is a failed TLS check      BackendMisconfigured    wrong CA or server name
``ConfigException``, ``ImportError``       BackendMisconfigured    kubeconfig, install
``ApiValueError``, ``ValueError``...       ``invalid``
=========================================  ======================  ==========================

409 AlreadyExists on create and 404 on read or delete are not errors: the adapter handles them
(:func:`is_already_exists`, :func:`is_not_found`) before this mapping sees them.

Invariants: every translated error is raised ``from`` the original; messages are one short line
(the server's ``Status.message``), never a header, token or request body; anything else
propagates unchanged (a bug must not be retried forever).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

from gpupool.backends.errors import (
    BackendError,
    BackendMisconfigured,
    BackendRejected,
    BackendUnavailable,
)

INSTALL_HINT = "install it with: pip install gpupool[kubernetes]"
_MESSAGE_MAX = 300
_TRANSPORT = frozenset(
    {
        "HTTPError",  # urllib3.exceptions: the base of every transport failure
        "MaxRetryError",
        "NewConnectionError",
        "ProtocolError",
        "ReadTimeoutError",
        "ConnectTimeoutError",
        "TimeoutError",
    }
)


def _names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of an ``ApiException`` (``None`` for anything else)."""
    if "ApiException" not in _names(exc):
        return None
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) and status > 0 else None


def status_body(exc: BaseException) -> dict[str, object]:
    """The API server's ``Status`` object carried by ``exc``, if any."""
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    try:
        found = json.loads(body) if isinstance(body, str) else None
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def is_already_exists(exc: BaseException) -> bool:
    return http_status(exc) == 409 and status_body(exc).get("reason", "AlreadyExists") == (
        "AlreadyExists"
    )


def is_not_found(exc: BaseException) -> bool:
    return http_status(exc) == 404


def _tls_failure(exc: BaseException) -> bool:
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if "SSLError" in _names(cause) and "CERTIFICATE_VERIFY_FAILED" in str(cause):
            return True
        reason = getattr(cause, "reason", None)
        cause = reason if isinstance(reason, BaseException) else cause.__cause__
    return False


def classify(exc: BaseException, *, invalid: type[BackendError]) -> type[BackendError] | None:
    """Which backend error ``exc`` is, or ``None`` when it is not the client's."""
    names = _names(exc)
    if isinstance(exc, ImportError) or "ConfigException" in names:
        return BackendMisconfigured
    status = http_status(exc)
    if status is not None:
        message = str(status_body(exc).get("message", "")).lower()
        if status in (408, 409, 410, 429) or status >= 500:
            return BackendUnavailable
        if status == 403 and "exceeded quota" in message:
            return BackendUnavailable
        if status in (401, 403, 404):
            return BackendMisconfigured
        return invalid
    if "ApiException" in names:  # status 0: the client failed before an answer came
        return BackendUnavailable
    if names & _TRANSPORT or isinstance(exc, OSError):
        return BackendMisconfigured if _tls_failure(exc) else BackendUnavailable
    if names & {"ApiValueError", "ApiTypeError"} or isinstance(exc, ValueError | TypeError):
        return invalid
    return None


def summary(exc: BaseException) -> str:
    """One short line: ``HTTP 403 Forbidden: <the server's message>``, or the exception's."""
    status = http_status(exc)
    if status is not None:
        body = status_body(exc)
        text = str(body.get("message") or getattr(exc, "reason", "") or "")
        line = f"HTTP {status} {getattr(exc, 'reason', '') or ''}".rstrip()
        text = f"{line}: {text}" if text else line
    else:
        lines = [s.strip() for s in str(exc).splitlines() if s.strip()]
        text = lines[0] if lines else type(exc).__name__
    return text[:_MESSAGE_MAX]


@contextmanager
def map_kubernetes_errors(
    action: str, *, invalid: type[BackendError] = BackendRejected
) -> Iterator[None]:
    """Re-raise what goes wrong while doing ``action`` as exactly one backend error.

    ``invalid`` is what a refused request means here: the attempt's fault (``BackendRejected``)
    when creating its Job, the pool's (``BackendMisconfigured``) when loading the kubeconfig.
    """
    try:
        yield
    except BackendError:
        raise
    except Exception as exc:
        kind = classify(exc, invalid=invalid)
        if kind is None:
            raise
        message = f"kubernetes backend cannot {action}: {summary(exc)}"
        if isinstance(exc, ImportError):
            message = f"{message}; {INSTALL_HINT}"
        elif kind is BackendUnavailable:
            message = f"kubernetes backend cannot {action} now: {summary(exc)}"
        raise kind(message) from exc
