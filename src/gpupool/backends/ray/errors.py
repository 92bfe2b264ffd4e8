"""Translate what Ray's Jobs SDK raises into backend errors (docs/code-style.md §8).

The SDK (``ray.job_submission.JobSubmissionClient``) speaks HTTP through ``requests``. It
raises the builtin ``ConnectionError`` when the dashboard cannot be reached while it checks the
version, ``requests`` exceptions (all ``OSError``) for transport failures and timeouts,
``ray.exceptions.AuthenticationError`` for a missing or wrong token, ``RuntimeError("Request
failed with status code N: <body>")`` for every other non-200 answer, and ``ValueError`` or
``TypeError`` for arguments it refuses before sending anything. The classes are recognised
without importing Ray, so this module (and its tests) work where Ray is not installed.

Invariants:

* Every translated error is raised ``from`` the original; :class:`BackendError` passes.
* Messages are short (the dashboard answers 400 with a whole server traceback) and never hold
  the bearer token (``secrets`` are masked, in case a server ever echoes a header back).
* Anything not recognised propagates unchanged: a bug must not be retried forever.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from gpupool.backends.errors import (
    BackendError,
    BackendMisconfigured,
    BackendRejected,
    BackendUnavailable,
)

_STATUS = re.compile(r"status code (\d{3})")
_MISCONFIGURED_ERRNO = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
_MESSAGE_MAX = 300
INSTALL_HINT = "install it with: pip install gpupool[ray]"


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of a failed Jobs API request, if ``exc`` carries one."""
    response = getattr(exc, "response", None)
    code = getattr(response, "status_code", None)
    if isinstance(code, int):
        return code
    if isinstance(exc, RuntimeError):
        found = _STATUS.search(str(exc))
        return int(found.group(1)) if found else None
    return None


def is_duplicate_submission(exc: BaseException) -> bool:
    """Ray refused a submission id that is already in use (the key was submitted before)."""
    return isinstance(exc, RuntimeError) and "already exists" in str(exc)


def is_not_found(exc: BaseException) -> bool:
    """Ray does not know the submission id (never submitted, or its cluster was replaced)."""
    return isinstance(exc, RuntimeError) and (
        http_status(exc) == 404 and "does not exist" in str(exc)
    )


def _class_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def classify(exc: BaseException, *, invalid: type[BackendError]) -> type[BackendError] | None:
    """Which backend error ``exc`` is, or ``None`` when it is not the SDK's.

    ``invalid`` is what an argument the SDK refuses means here: the attempt's fault
    (``BackendRejected``) when submitting, the pool's (``BackendMisconfigured``) when building
    the client from the pool's options.
    """
    names = _class_names(exc)
    if "AuthenticationError" in names:  # ray.exceptions.AuthenticationError: token missing/wrong
        return BackendMisconfigured
    if isinstance(exc, ImportError):
        return BackendMisconfigured
    status = http_status(exc)
    if status in (401, 403):
        return BackendMisconfigured
    if status is not None and (status >= 500 or status in (408, 429)):
        return BackendUnavailable
    if isinstance(exc, OSError):  # requests' errors, ConnectionError, TimeoutError, file system
        if exc.errno in _MISCONFIGURED_ERRNO:
            return BackendMisconfigured
        return BackendUnavailable
    if isinstance(exc, RuntimeError):
        text = str(exc)
        if "Version check returned 404" in text or "is running on the cluster" in text:
            return BackendMisconfigured  # not a Ray dashboard, or a Ray too old for the Jobs API
        if status is not None and 400 <= status < 500:
            return invalid
        if "RayError" in names:
            return BackendUnavailable
        return None
    if isinstance(exc, ValueError | TypeError):
        return invalid
    return None


def summary(exc: BaseException, secrets: Iterable[str] = ()) -> str:
    """One short line about ``exc``: the last line of a server's answer, secrets masked."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip(" .")]
    text = lines[-1] if lines else type(exc).__name__
    if len(lines) > 1 and (found := _STATUS.search(lines[0])):
        text = f"HTTP {found.group(1)}: {text}"
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text[:_MESSAGE_MAX]


@contextmanager
def map_ray_errors(
    action: str,
    *,
    invalid: type[BackendError] = BackendRejected,
    secrets: Iterable[str] = (),
) -> Iterator[None]:
    try:
        yield
    except BackendError:
        raise
    except Exception as exc:
        kind = classify(exc, invalid=invalid)
        if kind is None:
            raise
        message = f"ray backend cannot {action}: {summary(exc, secrets)}"
        if isinstance(exc, ImportError):
            message = f"ray backend cannot {action}: {summary(exc)}; {INSTALL_HINT}"
        elif kind is BackendUnavailable:
            message = f"ray backend cannot {action} now: {summary(exc, secrets)}"
        raise kind(message) from exc
