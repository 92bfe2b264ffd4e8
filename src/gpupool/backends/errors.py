"""Backend errors, classified by what the caller should do about them.

Adapters translate their system's errors at the boundary (one ``map_<backend>_errors``
context manager each) into exactly one of these, chaining the original with ``from``.
"""

from __future__ import annotations


class BackendError(Exception):
    retryable = False


class BackendUnavailable(BackendError):
    """The system cannot be reached or is overloaded: retry later with backoff."""

    retryable = True


class BackendRejected(BackendError):
    """The system refused this attempt (bad spec, no such partition...): fail the attempt."""


class BackendMisconfigured(BackendError):
    """gpupool's own configuration for the backend is wrong: fail loudly, do not retry."""
