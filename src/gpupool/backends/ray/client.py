"""The slice of Ray's ``JobSubmissionClient`` the adapter uses, and the factory that builds one.

Ray is imported here, lazily, inside :func:`ray_jobs_client`, and nowhere else in gpupool.
Tests pass the adapter a fake with the same methods instead (docs/code-style.md §12).

The SDK sends every request without a timeout, so a dashboard that accepts a connection and
never answers would hang the control plane. :func:`ray_jobs_client` therefore subclasses the
client to give each request ``timeout_s`` (through ``_do_request``, which forwards keyword
arguments to ``requests.request``; present since the Jobs API exists).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol


class JobsClient(Protocol):
    def submit_job(self, *, entrypoint: str, **kwargs: Any) -> str: ...
    def get_job_info(self, job_id: str) -> Any: ...
    def list_jobs(self) -> list[Any]: ...
    def get_job_logs(self, job_id: str) -> str: ...
    def stop_job(self, job_id: str) -> bool: ...


# (address, headers, timeout_s) -> client. It may raise what the SDK raises: the adapter maps it.
ClientFactory = Callable[[str, Mapping[str, str], float], JobsClient]


def ray_jobs_client(address: str, headers: Mapping[str, str], timeout_s: float) -> JobsClient:
    """A real ``JobSubmissionClient`` for ``address``; checks that the Jobs API answers."""
    from ray.job_submission import JobSubmissionClient

    class _TimeoutClient(JobSubmissionClient):  # type: ignore[misc]
        def _do_request(self, method: str, endpoint: str, **kwargs: Any) -> Any:
            kwargs.setdefault("timeout", timeout_s)
            return super()._do_request(method, endpoint, **kwargs)

    return _TimeoutClient(address, headers=dict(headers) or None)
