"""Python SDK for the gpupool REST API (docs/architecture.md §7).

``Client`` (sync) and ``AsyncClient`` speak HTTP to ``/v1`` and return read models from
``gpupool.client.models``; any error body comes back as a typed exception from
``gpupool.client.errors``. The SDK imports nothing server-side, so it can be installed and used
on a laptop that only talks to a remote control plane. Its HTTP logging (httpx's request
lines) is redacted: a request URL may carry a signature (D4).
"""

from gpupool.client.async_sdk import AsyncClient
from gpupool.client.errors import (
    ConfigInvalid,
    Conflict,
    ConnectionFailed,
    Forbidden,
    GpupoolError,
    InvalidRequest,
    NotFound,
    ServerError,
    Unauthenticated,
    Unavailable,
)
from gpupool.client.models import (
    Attempt,
    Job,
    JobArray,
    Page,
    Pool,
    Reason,
    Resources,
    Team,
    TeamQuota,
    WhoAmI,
    WhyReport,
)
from gpupool.client.sdk import Client
from gpupool.data.redaction import protect_loggers

__all__ = [
    "AsyncClient",
    "Attempt",
    "Client",
    "ConfigInvalid",
    "Conflict",
    "ConnectionFailed",
    "Forbidden",
    "GpupoolError",
    "InvalidRequest",
    "Job",
    "JobArray",
    "NotFound",
    "Page",
    "Pool",
    "Reason",
    "Resources",
    "ServerError",
    "Team",
    "TeamQuota",
    "Unauthenticated",
    "Unavailable",
    "WhoAmI",
    "WhyReport",
]

protect_loggers("httpx", "gpupool.client")
