"""Translate what the Azure SDKs raise into backend errors (docs/code-style.md §8).

``azure-core`` raises ``HttpResponseError`` (with ``status_code`` and the service's error
``code``) for every non-2xx answer, with the subclasses ``ResourceNotFoundError`` (404) and
``ResourceExistsError`` (409); ``ClientAuthenticationError`` for 401 and for a credential that
cannot get a token (``azure-identity``'s ``CredentialUnavailableError`` is one);
``ServiceRequestError`` / ``ServiceResponseError`` when the service cannot be reached or does
not answer. Classes are recognised by name so that this module imports no SDK.

* cannot connect, timeout, 408, 429, 5xx, a busy service's code: ``BackendUnavailable``;
* 401, 403, a credential without a token, a missing SDK, no such pool, compute or
  workspace: ``BackendMisconfigured``;
* any other 4xx (the request for this attempt was refused): ``invalid``
  (``BackendRejected`` unless the caller says otherwise).

Both Azure adapters (Batch, Machine Learning) use it; messages are one line, with the
service's code, and never hold a URL's query (a SAS) or a key.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from gpupool.backends.errors import (
    BackendError,
    BackendMisconfigured,
    BackendRejected,
    BackendUnavailable,
)

INSTALL_HINT = "install the Azure SDKs with: pip install 'gpupool[azure]'"
_MESSAGE_MAX = 300
# Service error codes that mean "the account or its setup is wrong", whatever the status.
MISCONFIGURED_CODES = frozenset(
    {
        "AuthenticationFailed",
        "AuthorizationFailure",
        "InsufficientPermissions",
        "AccountIsDisabled",
        "PoolNotFound",
        "ResourceGroupNotFound",
        "WorkspaceNotFound",
        "ComputeNotFound",
    }
)
# ... and those that mean "busy or a quota that frees up": retry later.
BUSY_CODES = frozenset({"ServerBusy", "OperationTimedOut", "TooManyRequests", "InternalError"})
_QUERY = re.compile(r"\?[^\s'\"]*")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def status_code(exc: BaseException) -> int | None:
    code = getattr(exc, "status_code", None)
    return code if isinstance(code, int) else None


def error_code(exc: BaseException) -> str | None:
    """The service's error code (``TaskExists``, ``JobNotFound``, ...), if it sent one."""
    error = getattr(exc, "error", None)
    code = getattr(error, "code", None)
    if isinstance(code, str) and code:
        return code
    return None


def is_code(exc: BaseException, *codes: str) -> bool:
    return error_code(exc) in codes


def is_not_found(exc: BaseException) -> bool:
    return "ResourceNotFoundError" in _names(exc) or status_code(exc) == 404


def is_exists(exc: BaseException) -> bool:
    return "ResourceExistsError" in _names(exc) or status_code(exc) == 409


def classify(exc: BaseException, *, invalid: type[BackendError]) -> type[BackendError] | None:
    """Which backend error ``exc`` is, or ``None`` when it is not the SDKs'."""
    names = _names(exc)
    if isinstance(exc, ImportError):
        return BackendMisconfigured
    if "ClientAuthenticationError" in names:
        return BackendMisconfigured
    if names & {"ServiceRequestError", "ServiceResponseError", "ServiceRequestTimeoutError"}:
        return BackendUnavailable
    code, status = error_code(exc), status_code(exc)
    if code in MISCONFIGURED_CODES or status in (401, 403):
        return BackendMisconfigured
    if code in BUSY_CODES or (status is not None and (status >= 500 or status in (408, 429))):
        return BackendUnavailable
    if status is not None and 400 <= status < 500:
        return invalid
    if "HttpResponseError" in names or "AzureError" in names:
        return BackendUnavailable
    if isinstance(exc, OSError):
        return BackendUnavailable
    if isinstance(exc, ValueError | TypeError):
        return invalid
    return None


def summary(exc: BaseException) -> str:
    """One short line: the service's code and message, URL queries (SAS tokens) removed."""
    message = getattr(getattr(exc, "error", None), "message", None) or str(exc)
    message = _ANSI.sub("", str(message))  # azure-ai-ml colours its messages
    lines = [line.strip() for line in message.splitlines() if any(c.isalpha() for c in line)]
    text = lines[0] if lines else type(exc).__name__
    if code := error_code(exc):
        text = f"{code}: {text}" if not text.startswith(code) else text
    if (status := status_code(exc)) is not None:
        text = f"HTTP {status}: {text}"
    return _QUERY.sub("?…", text)[:_MESSAGE_MAX]


@contextmanager
def map_azure_errors(
    backend: str, action: str, *, invalid: type[BackendError] = BackendRejected
) -> Iterator[None]:
    """Re-raise what the Azure SDK raises inside as a backend error (``from`` the original)."""
    try:
        yield
    except BackendError:
        raise
    except Exception as exc:
        kind = classify(exc, invalid=invalid)
        if kind is None:
            raise
        if isinstance(exc, ImportError):
            message = f"{backend} backend cannot {action}: {summary(exc)}; {INSTALL_HINT}"
        elif kind is BackendUnavailable:
            message = f"{backend} backend cannot {action} now: {summary(exc)}"
        else:
            message = f"{backend} backend cannot {action}: {summary(exc)}"
        raise kind(message) from exc


def map_azure_batch_errors(
    action: str, *, invalid: type[BackendError] = BackendRejected
) -> AbstractContextManager[None]:
    return map_azure_errors("azure-batch", action, invalid=invalid)
